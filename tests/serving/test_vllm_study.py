"""A study through vLLM (``--runtime vllm``): the embedded Gemma-3-270M's configurations timed and scored by vLLM
with poptune's plugin, two engines for the whole study, the verdict naming the runtime."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from poptune.cli import main
from poptune.errors import ConfigError
from poptune.kv import registry
from poptune.problem.problem import TuningProblem

pytestmark = pytest.mark.vllm


@pytest.mark.integration
def test_a_study_through_vllm_ends_with_a_verdict_that_names_it(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    code = main(["study", "--model", "gemma-3", "--runtime", "vllm", "--tasks", "embedded", "--lengths", "256",
                 "--limit", "8", "--items", "8", "--certify", "8", "--trials", "3", "--repeats", "3",
                 "--max-pairs", "3", "--time-budget", "none", "--no-confirm", "--enqueue", "6/last/0",
                 "--storage", f"sqlite:///{db}"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[runtime vllm: timed and scored through it]" in out
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT value_json FROM study_user_attributes WHERE key = 'problem'").fetchall()
    assert json.loads(rows[0][0])["runtime"] == "vllm"


def test_what_the_vllm_runtime_cannot_run_is_refused_at_once() -> None:
    with pytest.raises(ConfigError, match="embedded generation tasks"):
        TuningProblem(tasks=("piqa",), runtime="vllm")
    with pytest.raises(ConfigError, match="own K/V only"):
        TuningProblem(runtime="vllm", kv=registry.NAMES[:2])
    with pytest.raises(ConfigError, match="`runtime` must be one of hf, vllm"):
        TuningProblem(runtime="tensorrt")
