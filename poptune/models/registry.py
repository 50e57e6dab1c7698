"""Names to ``(model, tokenizer)``: the embedded Gemma-3-270M, hub ids, local directories, tiny random configs."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.device import resolve_device, resolve_dtype
from poptune.errors import ConfigError, ModelNotFoundError
from poptune.models import configs

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["ModelSpec", "resolve_model", "load_model", "load_tokenizer", "max_positions", "model_names",
           "weights_fingerprint", "directory_fingerprint",
           "model_directory"]

log = logging.getLogger(__name__)

WEIGHTS = ("pretrained", "random")

_ALIASES = {"gemma-3": "gemma-3-270m"}

_HUB_IDS = {
    "gemma-3-270m": "google/gemma-3-270m",
    "gemma-3-1b": "google/gemma-3-1b-it",
    "gemma-3-4b": "google/gemma-3-4b-it",
    "gemma-3-12b": "google/gemma-3-12b-it",
    "llama-3.1": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3": "Qwen/Qwen3-8B",
    "qwen3-vl": "Qwen/Qwen3-VL-8B-Instruct",
}

_EMBEDDED = "gemma-3-270m"


@dataclass(frozen=True)
class ModelSpec:
    """What a model name resolves to.

    Attributes:
        name: Canonical poptune name (``gemma-3-270m``, ``tiny-llama``, ...) or the local path given.
        source: ``embedded``, ``hub``, ``local`` or ``tiny``.
        hub_id: Hugging Face id for hub models, else None.
        path: Local directory for ``local`` models, else None.
    """

    name: str
    source: str
    hub_id: str | None = None
    path: str | None = None


def model_names() -> tuple[str, ...]:
    """Every registered name, aliases included (local paths are accepted too)."""
    return (*_ALIASES, *_HUB_IDS, *configs.tiny_names())


def resolve_model(name: str) -> ModelSpec:
    """Resolve a registered name, alias or local directory; raise :class:`ModelNotFoundError` otherwise."""
    canonical = _ALIASES.get(name, name)
    if canonical == _EMBEDDED:
        return ModelSpec(canonical, "embedded", hub_id=_HUB_IDS[canonical])
    if canonical in _HUB_IDS:
        return ModelSpec(canonical, "hub", hub_id=_HUB_IDS[canonical])
    if configs.tiny_config(canonical) is not None:
        return ModelSpec(canonical, "tiny")
    if os.path.isdir(name):
        return ModelSpec(str(Path(name)), "local", path=str(Path(name).resolve()))
    import difflib

    close = difflib.get_close_matches(name, model_names(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ModelNotFoundError(
        f"unknown model {name!r}{hint}: use one of {', '.join(model_names())} or a local model directory"
    )


def load_model(
    name: str,
    *,
    device: "str | torch.device" = "cpu",
    dtype: "str | torch.dtype | None" = None,
    weights: str = "pretrained",
) -> "tuple[PreTrainedModel, PreTrainedTokenizerBase]":
    """Load a model and its tokenizer by poptune name, hub id alias or local directory.

    Args:
        name: ``gemma-3`` (the embedded Gemma-3-270M), ``gemma-3-1b``/``-4b``/``-12b``, ``llama-3.1``,
            ``qwen3``, ``qwen3-vl``, ``tiny-llama``/``tiny-qwen3``/``tiny-gemma3``/``tiny-qwen3-vl``/
            ``tiny-gemma3-vl``, or a local Hugging Face model directory. Gemma-3 4B/12B and Qwen3-VL are
            vision-language models (prompt them with images through :func:`poptune.models.image_prompt`).
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``float32``, ``bfloat16``, ``float16`` or a torch dtype; None: the device's native
            precision (:func:`poptune.device.resolve_dtype`: bfloat16 on CUDA and on CPUs with AMX, else float32).
        weights: ``pretrained``, or ``random`` for the full-size architecture with random weights (for
            latency only: timing does not depend on weight values). Tiny models are always random.

    Returns:
        The model in eval mode on ``device`` (its LM head a :class:`~poptune.models.head.RowsHead`) and its
        tokenizer (left padding, a pad token set).

    Raises:
        ModelNotFoundError: unknown name, or weights that cannot be found (offline and not cached).
        DeviceError: a device this machine does not have.
        ConfigError: bad ``dtype`` or ``weights``.
    """
    if weights not in WEIGHTS:
        raise ConfigError(f"`weights` must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    spec = resolve_model(name)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)

    if spec.source == "tiny":
        import torch

        # Built on the CPU and moved: the same seeded weights on every device (a CUDA generator draws others).
        tiny = configs.tiny_config(spec.name)
        assert tiny is not None  # resolve_model made a "tiny" spec of a tiny config's name
        model = _random_model(tiny, torch.device("cpu"), torch_dtype).to(dev)
        tokenizer = _tiny_tokenizer()
    elif weights == "random":
        model, tokenizer = _random_model(_config_for_random(spec), dev, torch_dtype), _tokenizer_for_random(spec)
    else:
        directory = _pretrained_dir(spec)
        model, tokenizer = _from_pretrained(directory, spec, dev, torch_dtype), _load_tokenizer(directory, spec)
    model.eval()
    from poptune.models.head import use_rows_head

    use_rows_head(model)  # a few rows' logits on the CPU: weight @ hidden.T (poptune.models.head)
    _prepare_tokenizer(tokenizer, model)
    return model, tokenizer


def max_positions(name: str, weights: str = "pretrained") -> int | None:
    """The model's context in tokens (``max_position_embeddings``), read from its configuration without loading
    it: poptune's own config of a tiny model, the embedded model or random weights (what is built), the
    ``config.json`` of a local directory or of a hub model already in the local Hugging Face cache (never
    downloaded); None where none is at hand or it names none (loading the model checks again).

    Raises:
        ModelNotFoundError: an unknown name (:func:`resolve_model`).
    """
    return _config_int(name, weights, "max_position_embeddings")


def layer_count(name: str, weights: str = "pretrained") -> int | None:
    """The model's decoder layers (``num_hidden_layers``), read from its configuration without loading it as
    :func:`max_positions` reads its context; None where none is at hand."""
    return _config_int(name, weights, "num_hidden_layers")


def _config_int(name: str, weights: str, key: str) -> int | None:
    """A positive integer ``key`` of the model's (or its text model's) configuration, without loading it."""
    import json

    spec = resolve_model(name)
    config: Any = configs.tiny_config(spec.name)
    if config is None and (spec.source == "embedded" or weights == "random" and spec.source == "hub"):
        config = configs.full_config(spec.name)
    if config is None:
        found = Path(spec.path) / "config.json" if spec.path else _cached_hub_file(spec.hub_id, "config.json")
        try:
            config = json.loads(found.read_text(encoding="utf-8")) if found is not None else None
        except (OSError, ValueError, RecursionError):
            config = None
    if not isinstance(config, dict):
        return None
    for level in (config, config.get("text_config")):
        value = level.get(key) if isinstance(level, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def load_tokenizer(name: str, weights: str = "pretrained") -> Any:
    """The model's tokenizer alone, without its weights, where it is at hand (a tiny model's, the embedded
    model's once built, a local directory's or one in the Hugging Face cache); None otherwise (nothing is built
    or downloaded: loading the model checks again)."""
    spec = resolve_model(name)
    if spec.source == "tiny":
        return _tiny_tokenizer()
    try:
        if spec.source == "embedded":
            from poptune.models.embedded import built_model_dir

            directory = built_model_dir()
            return _load_tokenizer(str(directory), spec) if directory is not None else None
        if spec.source == "local":
            return _load_tokenizer(str(spec.path), spec)
        found = _cached_hub_file(spec.hub_id, "tokenizer_config.json")
        return _load_tokenizer(str(found.parent), spec) if found is not None else None
    except ModelNotFoundError:
        return None


def _cached_hub_file(hub_id: str | None, filename: str) -> Path | None:
    """``filename`` of ``hub_id`` if the local Hugging Face cache holds it (nothing is downloaded)."""
    if hub_id is None:
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hub_id, filename)
    return Path(found) if isinstance(found, str) else None


def weights_fingerprint(name: str, weights: str = "pretrained") -> str:
    """A short identity of the weights a name loads, recorded with exported configurations.

    Embedded: the GGUF's sha256. Random weights (tiny models, ``weights="random"``): ``random-seed0`` and a
    hash of the config. Hub and local checkpoints: a hash of ``config.json`` and of the weight files' names
    and sizes (cheap for multi-GB checkpoints, and it changes whenever the weights are replaced).
    """
    import hashlib
    import json

    spec = resolve_model(name)
    if spec.source == "tiny" or weights == "random":
        config = configs.tiny_config(spec.name) or configs.full_config(spec.name) or {"path": spec.path}
        digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        return f"random-seed0-config-{digest}"
    return directory_fingerprint(_pretrained_dir(spec))


def model_directory(name: str) -> str:
    """The Hugging Face model directory a serving engine loads for ``name``: the embedded model's cache folder
    (built on first use) or a local directory.

    Raises:
        ConfigError: A tiny random model or a hub id (no directory of weights here to serve).
    """
    spec = resolve_model(name)
    if spec.source not in ("embedded", "local"):
        raise ConfigError(f"a serving engine loads a model directory (the embedded gemma-3 or a local one), not "
                          f"{name!r}")
    return _pretrained_dir(spec)


def directory_fingerprint(directory: "str | Path") -> str:
    """The weights fingerprint of a model directory (what :func:`weights_fingerprint` records for a name that
    loads it): the embedded model's cache folder, its GGUF's sha256; any other, a hash of ``config.json`` and of
    the weight files' names and sizes. Serving runtimes check an exported configuration with it."""
    import hashlib
    import json

    directory = Path(directory)
    marker = directory / "poptune-cache.json"
    if marker.is_file():
        return f"gguf-sha256-{json.loads(marker.read_text())['gguf_sha256']}"
    files = hashlib.sha256((directory / "config.json").read_bytes())
    for path in sorted(directory.glob("*.safetensors")):
        files.update(f"{path.name}:{path.stat().st_size}".encode())
    return f"files-sha256-{files.hexdigest()[:32]}"


# --------------------------------------------------------------------------------------------------------------


def _pretrained_dir(spec: ModelSpec) -> str:
    if spec.source == "embedded":
        from poptune.models.embedded import embedded_model_dir

        return str(embedded_model_dir())
    if spec.source == "local":
        assert spec.path is not None  # resolve_model gives a local spec its path
        return spec.path
    from huggingface_hub import snapshot_download

    assert spec.hub_id is not None  # resolve_model gives a hub spec its id
    try:
        return snapshot_download(spec.hub_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"])
    except Exception as e:  # offline, gated, or absent: one line naming what was looked for
        raise ModelNotFoundError(
            f"model {spec.name!r} ({spec.hub_id}) is not in the local Hugging Face cache and the hub cannot be "
            f"reached ({type(e).__name__}); download it first or pass a local directory"
        ) from e


def _from_pretrained(directory: str, spec: ModelSpec, device: "torch.device", dtype: "torch.dtype") -> Any:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(directory)
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(f"{directory} is not a Hugging Face model directory: {e}") from e
    auto = _auto_class(config)
    return auto.from_pretrained(directory, dtype=dtype, device_map=None).to(device)


def _auto_class(config: Any) -> Any:
    import transformers

    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith("ForConditionalGeneration") for a in architectures):
        return transformers.AutoModelForImageTextToText
    return transformers.AutoModelForCausalLM


def _config_for_random(spec: ModelSpec) -> dict[str, Any]:
    if spec.source == "local":
        from transformers import AutoConfig

        assert spec.path is not None  # resolve_model gives a local spec its path
        return AutoConfig.from_pretrained(spec.path).to_dict()
    config = configs.full_config(spec.name)
    if config is None:
        raise ModelNotFoundError(f"poptune has no full-size config for {spec.name!r}")
    return config


def _random_model(config_dict: dict[str, Any], device: "torch.device", dtype: "torch.dtype") -> Any:
    """Build a model from a config dict with seeded random weights, directly on ``device``."""
    import torch
    from transformers import AutoConfig

    config_dict = dict(config_dict)
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    auto = _auto_class(config)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.device(device):
        torch.manual_seed(0)
        model = auto.from_config(config, dtype=dtype)
        std = getattr(config, "initializer_range", 0.02)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.rsplit(".", 1)[-1] in _ZERO_INIT_INPUTS:
                    param.normal_(0.0, std)
    return model


# Parameters a model initialises to zeros although its input flows through them: Gemma-3's multimodal
# projection (zeros would give every image token the same zero embedding, so the image would not matter).
_ZERO_INIT_INPUTS = ("mm_input_projection_weight",)


def _tiny_tokenizer() -> Any:
    from poptune.models.tokenizer import byte_tokenizer

    return byte_tokenizer()


def _tokenizer_for_random(spec: ModelSpec) -> Any:
    """The real tokenizer where one is at hand, else byte-level ids (token values do not change latency).

    Gemma-3 shares the embedded model's tokenizer, but only once its cache is built: random weights never
    build the embedded checkpoint (about 100 s of CPU before anything reaches the GPU).
    """
    if spec.name.startswith("gemma-3"):
        from poptune.models.embedded import built_model_dir

        directory = built_model_dir()
        if directory is not None:
            return _load_tokenizer(str(directory), spec)
        log.warning("the embedded Gemma-3 cache is not built: using byte-level token ids for %s (fine for "
                    "latency; random weights build no checkpoint)", spec.name)
        return _tiny_tokenizer()
    try:
        return _load_tokenizer(_pretrained_dir(spec), spec)  # a local spec: its own folder
    except ModelNotFoundError:
        log.warning("no tokenizer for %s offline: using byte-level token ids (fine for latency)", spec.name)
        return _tiny_tokenizer()


def _load_tokenizer(directory: str, spec: ModelSpec) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(f"no tokenizer for {spec.name!r} in {directory}: {e}") from e


def _prepare_tokenizer(tokenizer: Any, model: Any) -> None:
    """Left padding (what batched generation needs) and a pad token."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None and generation_config.pad_token_id is None:
        generation_config.pad_token_id = tokenizer.pad_token_id
