"""POP where models are served: poptune's vLLM plugin (``vllm_plugin``, ``vllm_pop``, applied inside vLLM's own
processes) and the worker a poptune process drives vLLM through (``vllm_worker``, run in vLLM's environment).
Nothing here is imported by ``import poptune``."""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = ["vllm_client", "vllm_plugin", "vllm_pop", "vllm_worker"]
