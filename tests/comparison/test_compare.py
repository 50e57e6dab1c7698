"""`poptune compare` on a tiny model: every method scored on the same items and timed per request profile."""

import json

from poptune.cli import main


def test_compare_writes_a_record_the_leaderboard_rebuilds(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    out = raw / "methods-embedded-tiny-llama.json"
    code = main(["compare", "--model", "tiny-llama", "--tasks", "passkey", "--workload", "embedded", "--items", "3",
                 "--pop", "1/last/0", "--methods", "static-last,width", "--ratios", "0.5", "--profiles", "32+4",
                 "--pairs", "6", "--decode-steps", "2", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    names = [m["name"] for m in record["methods"]]
    assert names == ["full", "pop 1/last/0", "static-last 0.5", "width 0.5"]
    items = {m["name"]: m["items"] for m in record["methods"]}
    assert len({json.dumps(v) for v in items.values()}) == 1 and len(items["full"]["passkey"]) == 3  # same items
    timing = record["methods"][2]["timing"]["32+4"]
    assert len(timing["ttft_ms"]["a"]) == len(timing["tpot_ms"]["b"]) == 6 and "timing" not in record["methods"][0]
    assert record["methods"][3]["details"]["channels_kept"]  # the width baseline's pruned channels
    code = main(["leaderboard", "--records", str(raw), "--out", str(tmp_path / "board")])
    assert code == 0
    text = (tmp_path / "board" / f"methods-tiny-llama-{record['hardware']['hardware_id']}.md").read_text()
    assert "## embedded: passkey" in text and "| width |" in text


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    base = ["compare", "--model", "tiny-llama", "--tasks", "passkey", "--workload", "w", "--pop", "1/last/0", "--out",
            str(tmp_path / "r.json")]  # a --pop that fits tiny-llama (the default's 6/last/0 is refused first)
    for extra, said in ((["--pop", "1/last"], "SKIP/BOUNDARY/OFFSET"), (["--profiles", "32x4"], "PROMPT+OUTPUT"),
                        (["--methods", "nope"], "unknown baseline"), (["--ratios", "2"], "(0, 1)"),
                        (["--pairs", "3"], ">= 6")):
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "r.json").exists()
    assert main(["leaderboard", "--records", str(tmp_path / "none")]) == 2
    capsys.readouterr()
    (tmp_path / "r.json").write_text("{}")  # a record already there: never overwritten
    assert main(base) == 2
    err = capsys.readouterr().err.strip()
    assert "never overwritten" in err and len(err.splitlines()) == 1, err
    assert (tmp_path / "r.json").read_text() == "{}"


def test_skip_scores_items_after_the_first_and_tasks_none_times_only(tmp_path, capsys):
    def run(*extra):
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
        code = main(["compare", "--model", "tiny-llama", "--workload", "w", "--pop", "1/last/0", "--methods",
                     "static-last", "--ratios", "0.5", "--pairs", "6", "--decode-steps", "1", "--out", str(out),
                     *extra])
        assert code == 0, capsys.readouterr().err
        return json.loads(out.read_text())

    first = run("--tasks", "passkey", "--items", "4", "--profiles", "none")
    held_out = run("--tasks", "passkey", "--items", "2", "--skip", "2", "--profiles", "none")
    assert held_out["skip"] == 2
    assert held_out["methods"][0]["items"]["passkey"] == first["methods"][0]["items"]["passkey"][2:]
    timed = run("--tasks", "none", "--profiles", "16+2")
    assert timed["tasks"] == [] and timed["per_task"] == 0
    assert all("outcomes" not in m for m in timed["methods"]) and "timing" in timed["methods"][1]
    assert main(["compare", "--model", "tiny-llama", "--workload", "w", "--tasks", "none", "--profiles", "none",
                 "--pop", "1/last/0", "--out", str(tmp_path / "x.json")]) == 2
    assert "needs `--profiles`" in capsys.readouterr().err


def test_the_pop_rows_are_scored_from_the_full_models_trunk_with_the_same_outcomes(shared, monkeypatch):
    """Issue 56: `compare` scores every POP row beside the full model (one pass over the shared layers); each row's
    outcomes are those it gets scored alone, and a baseline's changed model never shares."""
    import contextlib

    from poptune.comparison.measure import compare, methods_for
    from poptune.engine import PopConfig
    from poptune.problem.evaluator import ConfigEvaluator
    from poptune.problem.problem import TuningProblem

    problem = TuningProblem(model="tiny-llama", tasks=("kv_recall",), lengths=(300,), limit=4, items_start=4,
                            max_drop=None, certify_limit=0)
    evaluator = ConfigEvaluator(problem, model=shared("tiny-llama"))
    rows = methods_for(evaluator, [PopConfig(2, "window-4"), PopConfig(3)], ["static-last"], [0.5])
    seen = []
    real = ConfigEvaluator.sharing

    @contextlib.contextmanager
    def spying(self, configs):
        with real(self, configs) as trunk:
            yield trunk
        seen.append((trunk.led, trunk.served, trunk.alone))

    monkeypatch.setattr(ConfigEvaluator, "sharing", spying)
    together = compare(evaluator, rows, workload="embedded", per_task=4, profiles=())
    assert seen and seen[0][0] >= 1 and seen[0][1] == 2 * seen[0][0]
    monkeypatch.setattr(ConfigEvaluator, "sharing", lambda self, configs: contextlib.nullcontext())
    alone = compare(evaluator, rows, workload="embedded", per_task=4, profiles=())
    assert [m["outcomes"] for m in together["methods"]] == [m["outcomes"] for m in alone["methods"]]
