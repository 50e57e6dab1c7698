"""One vLLM engine driven over a pipe: ``python -m poptune.serving.vllm_worker``, run in vLLM's environment.

vLLM pins its own transformers and torch, so it lives in an environment of its own (``docs/serving.md``); a poptune
process drives it through this worker (:class:`poptune.serving.vllm_client.VllmEngine`). The protocol is one JSON
object a line: requests on standard input, answers on the descriptor the worker was given (``--reply-fd``; vLLM's
own logging keeps standard output and error). Requests:

- ``{"op": "start", "engine": {...}, "poptune": {...} | null}``: make the ``LLM`` (the engine arguments as vLLM
  names them; ``poptune``: the plugin's settings, :mod:`poptune.serving.vllm_plugin`); answers ``{"ok": true}``.
- ``{"op": "generate", "prompts": [[ids...]...], "max_tokens": N, "logprobs": K, "prompt_logprobs": K | null}``:
  greedy generation of every prompt at once; answers each prompt's tokens and, with ``logprobs``, each generated
  token's top-K log-probabilities, and the call's seconds (perf_counter around ``LLM.generate``).
- ``{"op": "configure", "pop_config": {...}}``: serve another configuration from now on (an engine started with the
  plugin; :func:`poptune.serving.vllm_plugin.reconfigure` on each of its workers, by name).
- ``{"op": "quit"}``.

An error answers ``{"error": "...", "kind": "..."}`` and the worker keeps serving (a request vLLM refused), except at
``start`` (the engine could not be made), after which it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any


def _generate(llm: Any, request: dict[str, Any]) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=int(request["max_tokens"]), logprobs=request.get("logprobs"),
                            prompt_logprobs=request.get("prompt_logprobs"), ignore_eos=bool(request.get("ignore_eos")),
                            detokenize=False)
    prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in request["prompts"]]
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    answers = []
    for out in outputs:
        completion = out.outputs[0]
        logprobs = None
        if completion.logprobs is not None:
            logprobs = [{str(token): float(lp.logprob) for token, lp in step.items()} for step in completion.logprobs]
        answers.append({"tokens": list(completion.token_ids), "logprobs": logprobs})
    return {"answers": answers, "seconds": seconds}


def _start(request: dict[str, Any]) -> Any:
    from vllm import LLM

    engine = dict(request.get("engine") or {})
    if request.get("poptune"):
        engine["additional_config"] = {"poptune": request["poptune"]}
    return LLM(**engine)


def main(argv: list[str] | None = None) -> int:
    """Serve requests until ``quit`` or the end of standard input."""
    parser = argparse.ArgumentParser(prog="python -m poptune.serving.vllm_worker")
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args(argv)
    reply = os.fdopen(args.reply_fd, "w", buffering=1)
    llm = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "quit":
            break
        try:
            if op == "start":
                llm = _start(request)
                answer: dict[str, Any] = {"ok": True}
            elif op == "generate" and llm is not None:
                answer = _generate(llm, request)
            elif op == "configure" and llm is not None:
                answer = {"configs": llm.collective_rpc("poptune_reconfigure", args=(request["pop_config"],))}
            else:
                answer = {"error": f"unknown or premature request {op!r}", "kind": "InputError"}
        except Exception as e:  # noqa: BLE001 -- answered to the driver, which raises it as one line
            answer = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:2000], "kind": type(e).__name__}
            if op == "start":
                reply.write(json.dumps(answer) + "\n")
                return 2
        reply.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
