"""poptune's vLLM plugin: a configuration exported by ``poptune export`` served with POP by vLLM itself.

vLLM loads the plugins of its ``vllm.general_plugins`` entry-point group in every process it starts (the API
server or ``LLM``, the engine core, the workers); poptune declares :func:`register` there (``pyproject.toml``). It
does nothing until a configuration is asked for, in vLLM's own option for plugin settings or in the environment:

    vllm serve MODEL --additional-config '{"poptune": {"export": "pop.json"}}' --no-enable-prefix-caching
    POPTUNE_VLLM_EXPORT=pop.json vllm serve MODEL --no-enable-prefix-caching

``{"poptune": {"pop_config": {"skip": 6, "boundary": "last"}}}`` gives a configuration directly (no weights
check). An exported file is refused for other weights (its ``weights_fingerprint`` against the served model
directory's, :func:`poptune.models.registry.directory_fingerprint`) unless ``"force": true``.

What it changes, in four places (each wrapped, never replaced, so vLLM's own code still runs):

- the model runner's ``load_model``: after vLLM loads the model, POP is applied to it
  (:func:`poptune.serving.vllm_pop.apply`); a configuration that does not fit, an architecture or attention
  backend it does not cover, prefix caching left on (a cached block that held a prompt's boundary tokens is not
  what a longer prompt's POP writes there) stop the start with one line;
- the runner's ``_build_attention_metadata``: the step's plan (which tokens are deep) from the runner's prompt
  lengths and positions, the one thing vLLM's model forward is not given;
- the CPU build's GEMM dispatch, which packs a layer's weights and drops them: a fused QKV projection's K and V rows
  are kept first, so the pruned tokens' K/V cost only those rows;
- the input processor's parameter check: a request asking for prompt log-probabilities is refused (POP's shallow
  prefill does not compute them as the full model would), as vLLM refuses them with its own fast prefill; the
  server keeps serving.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from poptune.errors import ConfigError

__all__ = ["ENV", "reconfigure", "register", "requested_config"]

#: The environment variable naming an exported configuration to serve with POP.
ENV = "POPTUNE_VLLM_EXPORT"

_STATES: dict[int, Any] = {}  # id(model runner) -> its PopState (runners live as long as their process)


def requested_config(vllm_config: Any) -> Any:
    """The :class:`~poptune.engine.pop.PopConfig` this vLLM instance is asked to serve, or None.

    Raises:
        ConfigError: An unreadable or foreign configuration, or one tuned on other weights (unless forced).
    """
    from poptune.engine.pop import PopConfig

    settings = dict((getattr(vllm_config, "additional_config", None) or {}).get("poptune") or {})
    if not settings and os.environ.get(ENV):
        settings = {"export": os.environ[ENV]}
    if not settings:
        return None
    unknown = set(settings) - {"export", "pop_config", "force"}
    if unknown or ("export" in settings) == ("pop_config" in settings):
        raise ConfigError('poptune\'s vLLM settings take {"export": PATH} or {"pop_config": {...}} (and "force"), '
                          f"got {sorted(settings)}")
    if "pop_config" in settings:
        config = PopConfig.from_dict(dict(settings["pop_config"]))
    else:
        config = _exported(Path(settings["export"]), vllm_config, force=bool(settings.get("force")))
    return config


def _exported(path: Path, vllm_config: Any, *, force: bool) -> Any:
    from poptune.engine.pop import PopConfig
    from poptune.models.registry import directory_fingerprint

    try:
        data = json.loads(path.read_text())
        config = PopConfig.from_dict(dict(data["pop_config"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"{path} is not a configuration exported by poptune: {e}") from e
    tuned = (data.get("model") or {}).get("weights_fingerprint")
    served = vllm_config.model_config.model
    if not force:
        if not tuned:
            raise ConfigError(f"{path} names no weights fingerprint: pass \"force\": true to serve it on any weights")
        here = directory_fingerprint(served) if Path(served).is_dir() else None
        if here != tuned:
            raise ConfigError(f"{path} was tuned on other weights (fingerprint {tuned}; {served} is {here}): pass "
                              '"force": true to serve it anyway')
    return config


def _after_load(load_model: Any) -> Any:
    @functools.wraps(load_model)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = load_model(self, *args, **kwargs)
        config = requested_config(self.vllm_config)
        if config is not None:
            from poptune.serving import vllm_pop

            if self.vllm_config.cache_config.enable_prefix_caching:
                raise ConfigError("POP in vLLM needs prefix caching off (--no-enable-prefix-caching): a cached block "
                                  "that held a prompt's boundary tokens is not what a longer prompt's POP writes")
            _STATES[id(self)] = vllm_pop.apply(self.model, config)
        return out

    return wrapped


def reconfigure(worker: Any, pop_config: dict[str, Any]) -> str:
    """Serve another configuration on a running engine's worker (vLLM's ``collective_rpc("poptune_reconfigure")``
    calls it on each one, a method of vLLM's workers by name: a function would need vLLM's pickle fallback):
    the skipped layers of the last one restored, the new one applied. The engine must have started with the plugin.

    Raises:
        ConfigError: An engine started without poptune's plugin, or a configuration that does not fit.
    """
    from poptune.engine.pop import PopConfig
    from poptune.serving import vllm_pop

    runner = worker.model_runner
    state = _STATES.get(id(runner))
    if state is None:
        raise ConfigError("this vLLM engine was started without poptune's plugin: it cannot change configuration")
    config = PopConfig.from_dict(dict(pop_config))
    state.remove()
    _STATES[id(runner)] = vllm_pop.apply(runner.model, config)
    layers = vllm_pop.decoder_of(runner.model).layers
    kept = sum(layers[i].self_attn.qkv_proj in vllm_pop.KV_ROWS for i in _STATES[id(runner)].skipped)
    return f"{config}; K/V rows kept for {kept} of its {len(_STATES[id(runner)].skipped)} skipped layers"


def _planning(build: Any) -> Any:
    @functools.wraps(build)
    def wrapped(self: Any, num_tokens: int, num_reqs: int, *args: Any, **kwargs: Any) -> Any:
        state = _STATES.get(id(self))
        if state is not None:
            state.plan(self.positions[:num_tokens], self.query_start_loc.cpu[: num_reqs + 1],
                       self.input_batch.num_prompt_tokens_cpu_tensor[:num_reqs])
        return build(self, num_tokens, num_reqs, *args, **kwargs)

    return wrapped


def _refusing_prompt_logprobs(validate: Any) -> Any:
    @functools.wraps(validate)
    def wrapped(self: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(params, "prompt_logprobs", None) is not None and requested_config(self.vllm_config) is not None:
            from vllm.exceptions import VLLMValidationError

            raise VLLMValidationError("prompt log-probabilities are not served with poptune's POP: its pruned "
                                      "prefill does not compute them as the full model would",
                                      parameter="prompt_logprobs")
        return validate(self, params, *args, **kwargs)

    return wrapped


def _keeping_kv_rows(dispatch: Any) -> Any:
    """vLLM's CPU GEMM dispatch, which packs a layer's weight and drops it: for a fused QKV projection of a model
    served with POP, its K and V rows are kept first (:data:`poptune.serving.vllm_pop.KV_ROWS`)."""

    @functools.wraps(dispatch)
    def wrapped(layer: Any, *args: Any, **kwargs: Any) -> Any:
        weight = getattr(layer, "weight", None)
        if type(layer).__name__ == "QKVParallelLinear" and weight is not None and weight.ndim == 2 \
                and not weight.is_meta and _serving_pop():
            from poptune.serving.vllm_pop import KV_ROWS

            rows = layer.num_heads * layer.head_size
            bias = getattr(layer, "bias", None)
            KV_ROWS[layer] = (weight[rows:].detach().clone(), None if bias is None else bias[rows:].detach().clone())
        return dispatch(layer, *args, **kwargs)

    return wrapped


def _serving_pop() -> bool:
    from vllm.config import get_current_vllm_config_or_none

    config = get_current_vllm_config_or_none()
    try:
        return config is not None and requested_config(config) is not None
    except ConfigError:  # said in one line when the model is loaded and POP applied
        return False


def register() -> None:
    """vLLM's entry point: wrap the runner and input processor once per process (vLLM may call it again)."""
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner, "_poptune_registered", False):
        return
    from vllm.model_executor.layers import utils as layer_utils
    from vllm.v1.worker.gpu_worker import Worker

    Worker.poptune_reconfigure = reconfigure  # what LLM.collective_rpc("poptune_reconfigure", ...) calls by name
    GPUModelRunner._build_attention_metadata = _planning(GPUModelRunner._build_attention_metadata)
    layer_utils.dispatch_cpu_unquantized_gemm = _keeping_kv_rows(layer_utils.dispatch_cpu_unquantized_gemm)
    InputProcessor._validate_params = _refusing_prompt_logprobs(InputProcessor._validate_params)
    runners = [GPUModelRunner]
    try:
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner

        runners.append(CPUModelRunner)
    except ImportError:  # a GPU build without the CPU runner
        pass
    for runner in runners:
        if "load_model" in vars(runner):
            runner.load_model = _after_load(vars(runner)["load_model"])
    GPUModelRunner._poptune_registered = True
