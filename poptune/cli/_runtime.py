"""The ``--runtime`` option of the commands that measure through a serving engine, and the model directory vLLM
loads for them."""

from __future__ import annotations

import argparse

__all__ = ["add_runtime", "vllm_model_dir"]


def add_runtime(parser: argparse.ArgumentParser, what: str) -> None:
    """``--runtime hf|vllm``: poptune's engine on the Hugging Face model (default) or vLLM with poptune's plugin."""
    parser.add_argument("--runtime", choices=("hf", "vllm"), default="hf",
                        help=f"where POP runs: poptune's engine on the Hugging Face model (default), or vLLM with "
                             f"poptune's plugin (its own environment, docs/serving.md; {what})")


def vllm_model_dir(args: argparse.Namespace) -> str:
    """The model directory vLLM loads for ``--model``: the embedded model's cache folder, or a local directory.

    Raises:
        ConfigError: Another kind of model (tiny configs, hub ids), another device or random weights.
    """
    from poptune.errors import ConfigError
    from poptune.models.registry import model_directory

    if getattr(args, "device", None) not in (None, "cpu") or getattr(args, "weights", "pretrained") != "pretrained":
        raise ConfigError("--runtime vllm runs vLLM's CPU build on the pretrained weights here (docs/serving.md)")
    return model_directory(args.model)
