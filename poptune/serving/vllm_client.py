"""A vLLM engine in vLLM's own environment, driven from a poptune process (:mod:`poptune.serving.vllm_worker`).

    with VllmEngine(model_dir, pop={"pop_config": {"skip": 6}}) as pop, VllmEngine(model_dir) as full:
        pop.generate([[2, 651, 6037]], max_tokens=16)

Which Python runs vLLM: ``$POPTUNE_VLLM_PYTHON``; else this interpreter when it can import vLLM; else
``.venv-vllm/bin/python`` in the current folder or in the source checkout poptune runs from (what the README's
set-up line makes). Each engine is one worker process (and the processes vLLM starts under it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from poptune.errors import ConfigError, DeviceError, UnsupportedModelError

__all__ = ["LOG_ENV", "PYTHON_ENV", "VllmEngine", "vllm_python"]

#: The environment variable naming the Python interpreter of vLLM's environment.
PYTHON_ENV = "POPTUNE_VLLM_PYTHON"
#: The environment variable naming a file to keep the vLLM processes' log in.
LOG_ENV = "POPTUNE_VLLM_LOG"

_ERRORS = {"ConfigError": ConfigError, "UnsupportedModelError": UnsupportedModelError}


def vllm_python() -> str:
    """The Python interpreter that runs vLLM here.

    Raises:
        DeviceError: None is found (the message says how to make one).
    """
    named = os.environ.get(PYTHON_ENV)
    if named:
        if not os.access(named, os.X_OK):
            raise DeviceError(f"${PYTHON_ENV} names {named!r}, which is not an executable Python")
        return named
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    checkout = Path(__file__).resolve().parents[2]
    for root in (Path.cwd(), checkout):
        candidate = root / ".venv-vllm" / "bin" / "python"
        if candidate.is_file():
            return str(candidate)
    raise DeviceError(f"vLLM is not installed here: make its environment with the README's set-up line "
                      f"(.venv-vllm) or name its Python in ${PYTHON_ENV}")


class VllmEngine:
    """One vLLM ``LLM`` (float32 on the CPU by default) with poptune's plugin settings ``pop`` (None: the full model).

    Args:
        model: A Hugging Face model directory.
        pop: The plugin's settings (``{"export": path}`` or ``{"pop_config": {...}}``), or None.
        engine: More of vLLM's engine arguments (they override the defaults here).
    """

    def __init__(self, model: str | os.PathLike[str], *, pop: dict[str, Any] | None = None,
                 engine: dict[str, Any] | None = None) -> None:
        self.settings = {"model": str(model), "dtype": "float32", "enforce_eager": True,
                         "enable_prefix_caching": False, "max_model_len": 4096, "seed": 0} | dict(engine or {})
        self.pop = pop
        kept = os.environ.get(LOG_ENV)  # vLLM's own log kept in a file of the user's, else a temporary one
        self._log = open(kept, "w+") if kept else tempfile.TemporaryFile(mode="w+")
        read, write = os.pipe()
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
                   VLLM_CONFIGURE_LOGGING="1", TOKENIZERS_PARALLELISM="false")
        self._process = subprocess.Popen(
            [vllm_python(), "-m", "poptune.serving.vllm_worker", "--reply-fd", str(write)], stdin=subprocess.PIPE,
            stdout=self._log, stderr=self._log, pass_fds=(write,), text=True, env=env)
        os.close(write)
        self._replies = os.fdopen(read)
        try:
            self._ask({"op": "start", "engine": self.settings, "poptune": pop})
        except BaseException:
            self.close()
            raise

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None  # made with stdin=PIPE
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            pass
        line = self._replies.readline()
        if not line:
            raise DeviceError(f"the vLLM worker ended: {self._cause() or 'no message'}")
        answer = json.loads(line)
        if "error" in answer:
            cause = self._cause() if request["op"] == "start" else None
            kind = _ERRORS.get(cause[0] if cause else answer["kind"], ConfigError)
            raise kind(cause[1] if cause else answer["error"])
        return answer

    def _cause(self) -> tuple[str, str] | None:
        """The first poptune error vLLM's processes logged (vLLM re-raises a worker's as its own), if any."""
        self._log.seek(0)
        found = re.search(r"poptune\.errors\.(\w+): (.*)|^(ConfigError|UnsupportedModelError): (.*)",
                          self._log.read(), re.M)
        if found is None:
            return None
        return (found.group(1) or found.group(3), found.group(2) or found.group(4))

    def generate(self, prompts: list[list[int]], *, max_tokens: int, logprobs: int | None = None,
                 prompt_logprobs: int | None = None, ignore_eos: bool = False) -> dict[str, Any]:
        """Greedy answers of ``prompts`` (token ids): ``{"answers": [{"tokens", "logprobs"}...], "seconds"}``."""
        return self._ask({"op": "generate", "prompts": prompts, "max_tokens": max_tokens, "logprobs": logprobs,
                          "prompt_logprobs": prompt_logprobs, "ignore_eos": ignore_eos})

    def configure(self, config: dict[str, Any]) -> list[str]:
        """Serve the configuration ``config`` (a :meth:`PopConfig.to_dict <poptune.engine.pop.PopConfig.to_dict>`)
        from now on: an engine started with the plugin (``pop``) changes it without a restart. Returns what each
        of its workers applied."""
        applied: list[str] = self._ask({"op": "configure", "pop_config": config})["configs"]
        self.pop = {"pop_config": config}
        return applied

    def close(self) -> None:
        """Stop the worker (and the processes vLLM started under it)."""
        if self._process.poll() is None:
            try:
                assert self._process.stdin is not None
                self._process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self._process.stdin.close()
                self._process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        self._replies.close()
        self._log.close()

    def __enter__(self) -> "VllmEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
