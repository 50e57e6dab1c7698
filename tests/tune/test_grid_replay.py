"""A grid file (CSV) replayed without a database: exact and seeded-noise answers, the Gymnasium environment on
it, the tuner table on it, a stored study written as one, and bad files refused in one line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import gymnasium
import numpy as np
import optuna
import pytest
from gymnasium.utils.env_checker import check_env

import poptune.env  # noqa: F401  (registers the environments)
from poptune import ConfigError, InputError, PopConfig, store
from poptune.cli import main
from poptune.env import Measurement, ReplayEnv, TuningProblem, reward
from poptune.problem.grid import COLUMNS, draw, read_grid, write_grid
from poptune.problem.replay import Replay
from poptune.problem.space import all_configs
from poptune.reports.gridtable import write
from poptune.tune.efficiency import tuner_efficiency
from poptune.tune.gridstudy import grid_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

FIXTURE = Path(__file__).with_name("grid-fixture.csv")
TARGET = PopConfig(skip=2, boundary="window-16")  # the fixture's fastest configuration within its 2-point budget


def test_the_fixture_is_a_full_grid_read_as_recorded():
    grid = read_grid(FIXTURE)
    assert (grid.model, grid.num_layers, grid.max_drop, grid.reference_ms) == ("tiny-fixture", 3, 2.0, 100.0)
    assert set(grid.measurements) == set(all_configs(3))
    m = grid.measurements[TARGET]
    assert m.speedup == pytest.approx(2.30) and m.speedup_interval.ends() == pytest.approx((2.21, 2.39))
    assert m.drop_points == pytest.approx(1.0) and m.drop_upper == pytest.approx(1.9)
    assert m.objective_accuracy == pytest.approx(0.59) and m.items == {"workload": 128}
    assert grid.measurements[PopConfig(1, "window-64", 1)].noisy


def test_without_noise_the_replay_answers_the_recorded_figures():
    replay = Replay.from_csv(FIXTURE)
    for config, recorded in replay.table.items():
        assert replay.answer(config) is recorded
    with pytest.raises(ConfigError, match="holds no measurement"):
        replay.answer(PopConfig(skip=5))


def _figures(replay: Replay, order: list[PopConfig]) -> dict[PopConfig, tuple[float, float, float]]:
    return {c: (replay.answer(c).speedup, replay.answer(c).drop_points, replay.answer(c).objective_accuracy)
            for c in order}


def test_noise_is_seeded_drawn_within_the_interval_and_order_free():
    replay = Replay.from_csv(FIXTURE)
    configs = list(replay.table)
    first = _figures(replay.noisy(7), configs)
    assert first == _figures(replay.noisy(7), list(reversed(configs)))  # same seed: same answers, any order
    other = _figures(replay.noisy(8), configs)
    assert any(first[c] != other[c] for c in configs)  # another seed: other answers
    assert _figures(replay.noisy(None), configs) == _figures(replay, configs)
    for c, (speedup, drop, accuracy) in first.items():
        m = replay.table[c]
        assert m.speedup_interval.contains(speedup)
        assert float(m.drop["lo"]) <= drop <= float(m.drop["hi"])
        assert accuracy == pytest.approx(m.objective_accuracy - (drop - m.drop_points) / 100)
    assert any(first[c][0] != replay.table[c].speedup for c in configs)


def test_a_draw_keeps_the_interval_width_and_a_figure_without_interval():
    m = Replay.from_csv(FIXTURE).table[TARGET]
    drawn = draw(m, np.random.default_rng(0))
    assert drawn.speedup_interval.width == pytest.approx((2.39 - 2.21) * drawn.speedup / m.speedup)
    assert drawn.drop_upper - drawn.drop_points == pytest.approx(m.drop_upper - m.drop_points)
    plain = Measurement(config=PopConfig(1), target_length=16, accuracy={"t": 0.5}, full_accuracy={"t": 0.5},
                        latency={16: {"pop_ms": 1.0, "full_ms": 1.5, "speedup": 1.5, "ideal": 1.6}})
    again = draw(plain, np.random.default_rng(0))
    assert (again.speedup, again.drop_points) == (plain.speedup, plain.drop_points)


def test_the_csv_replay_env_passes_check_env_and_is_deterministic():
    env = gymnasium.make("poptune/POP-Replay-v0", grid=str(FIXTURE), noise=True)
    check_env(env.unwrapped)
    answers = []
    for _ in range(2):
        env.reset(seed=3)
        answers.append([env.step({"skip": s, "boundary": b, "offset": 0})[1:] for s, b in ((2, 3), (1, 0), (2, 3))])
    assert answers[0] == answers[1]  # the same seed, the same answers
    rewards = [a[0] for a in answers[0]]
    assert rewards[0] != rewards[2]  # a configuration stepped again is measured again: another draw
    env.reset(seed=4)
    assert env.step({"skip": 2, "boundary": 3, "offset": 0})[1] != rewards[0]


def test_the_csv_replay_env_without_noise_rewards_the_recorded_figures():
    env = ReplayEnv(grid=str(FIXTURE))
    check_env(env, skip_render_check=True)
    env.reset(seed=0)
    _, r, terminated, _, info = env.step({"skip": 2, "boundary": "window-16", "offset": 0})
    assert terminated and info["speedup"] == pytest.approx(2.30) and info["drop_points"] == pytest.approx(1.0)
    assert r == pytest.approx(reward(env.table[TARGET], 2.0)) == pytest.approx(2.30)
    assert env.observation_space.contains(env.reset()[0])
    with pytest.raises(ConfigError, match="not both"):
        ReplayEnv("sqlite:///x.db", grid=str(FIXTURE))


def test_the_tuner_table_on_the_fixture_is_reproducible():
    replay = Replay.from_csv(FIXTURE)
    kwargs = dict(max_drop=2.0, samplers=("tpe", "nsga2", "random", "grid"), seeds=3, noise=True)
    rows = tuner_efficiency(replay, **kwargs)
    assert rows == tuner_efficiency(replay, **kwargs)
    by = {r.sampler: r for r in rows}
    for r in rows:
        assert r.seeds == 3 and set(r.best_mean) == set(r.hv) == set(r.hit_counts) == {8, 16, 32}
        for n in (8, 16, 32):
            assert 1.0 <= r.best_mean[n].lo <= r.best_mean[n].point <= r.best_mean[n].hi <= 2.30 + 1e-9
            assert 0 <= r.hit_counts[n] <= 3
        assert r.best_mean[32].point >= r.best_mean[8].point and r.hv[32].point >= r.hv[8].point
        assert r.to_share is None or 1 <= r.to_share <= r.horizon == 32
    assert by["grid"].hit_counts[16] == 3 and by["grid"].best[16] == pytest.approx(2.30)  # 16 trials: the whole grid
    assert by["grid"].reached == 3


def test_the_gp_sampler_runs_offline():
    rows = tuner_efficiency(Replay.from_csv(FIXTURE), max_drop=2.0, samplers=("gp",), seeds=2, checkpoints=(4, 8))
    assert rows[0].sampler == "gp" and rows[0].horizon == 8


def test_the_tuner_table_refuses_a_partial_grid_and_unknown_samplers():
    replay = Replay.from_csv(FIXTURE)
    partial = Replay(replay.study_name, 3, dict(list(replay.table.items())[:12]), 2.0, 100.0)
    with pytest.raises(ConfigError, match="not a full grid: 4 configurations"):
        tuner_efficiency(partial, max_drop=2.0)
    with pytest.raises(ConfigError, match="unknown sampler"):
        tuner_efficiency(replay, max_drop=2.0, samplers=("cmaes",))


def _bad(tmp_path: Path, edit) -> Path:
    lines = FIXTURE.read_text().splitlines()
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(edit(lines)) + "\n")
    return path


@pytest.mark.parametrize(("edit", "message"), [
    (lambda ls: ls[:1], "holds no configuration"),
    (lambda ls: [ls[0].replace("speedup_lo,", "")] + ls[1:], "missing column"),
    (lambda ls: ls + [ls[3]], "row 18: .* appears twice"),
    (lambda ls: [ls[0], ls[1].replace("1.000,0.980", "fast,0.980")] + ls[2:], "row 2: `speedup` must be a number"),
    (lambda ls: [ls[0], ls[1], ls[2].replace(",none,", ",sideways,")] + ls[3:], r"row 3: not a configuration"),
    (lambda ls: [ls[0], ls[1], ls[2].replace("6.0,3.0,9.0", "6.0,9.0,3.0")] + ls[3:], "`drop_lo` 9.0 is above"),
    (lambda ls: [ls[0], ls[1], "9,none,0" + ls[2][len("1,none,0"):]] + ls[3:], "outside the search space"),
    (lambda ls: [ls[0], ls[1], ls[2].replace(",3,2.0,", ",4,2.0,")] + ls[3:], "`num_layers` '4' differs"),
    (lambda ls: [ls[0], ls[1], ls[2][:40]] + ls[3:], "row 3: .* cells where the header has"),
])
def test_a_malformed_grid_file_is_one_clear_line(tmp_path, edit, message):
    with pytest.raises(InputError, match=message) as raised:
        read_grid(_bad(tmp_path, edit))
    assert "\n" not in str(raised.value)


def test_a_missing_or_binary_grid_file_is_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        Replay.from_csv(tmp_path / "none.csv")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not a"):
        read_grid(tmp_path / "binary.csv")


def test_the_tuners_command_reads_the_csv_and_exits_2_on_a_bad_one(tmp_path, capsys):
    out = tmp_path / "tuner.md"
    assert main(["tuners", "--grid", str(FIXTURE), "--samplers", "tpe,random,grid", "--seeds", "3", "--noise",
                       "--out", str(out)]) == 0
    text = out.read_text()
    assert re.search(r"\| grid \| [^|]+ \| 2\.300 \[2\.300, 2\.300\] \| 2\.300 \[2\.300, 2\.300\] \|", text)
    assert "## Against random search" in text and "drawn from each configuration's recorded 95% intervals" in text
    capsys.readouterr()
    assert "- command: `poptune tuners --grid " in text
    assert main(["tuners", "--grid", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("poptune tuners: error: grid file") and "\n" not in err
    assert main(["tuners", "--grid", str(_bad(tmp_path, lambda ls: ls[:5])), "--out", str(out)]) == 2
    assert "not a full grid" in capsys.readouterr().err


def _stored_grid(url: str) -> optuna.Study:
    """A stored study holding the fixture's measurements as its trials (no model)."""
    grid = read_grid(FIXTURE)
    study = optuna.create_study(storage=url, study_name="tiny-fixture@cpu-fixture-2t",
                                directions=["minimize", "maximize"])
    problem = TuningProblem(model="tiny-llama", tasks=("passkey",), lengths=(512,), kv=("own",))
    study.set_user_attr("problem", problem.to_dict())
    for key, value in (("num_layers", 3), ("model", "tiny-fixture"), ("reference_prefill_ms", 100.0),
                       ("hardware", {"hardware_id": "cpu-fixture-2t"}), ("versions", {"poptune": "0.1.0"})):
        study.set_user_attr(key, value)
    for m in grid.measurements.values():
        study.add_trial(optuna.trial.create_trial(values=list(m.objectives()), user_attrs=m.info()))
    return study


def test_a_stored_grid_study_written_as_csv_reads_back_the_same(tmp_path):
    study = _stored_grid(f"sqlite:///{tmp_path}/grid.db")
    assert write_grid(study, tmp_path / "grid.csv") == 16
    header = (tmp_path / "grid.csv").read_text().splitlines()[0]
    assert header == ",".join(COLUMNS)
    back, original = Replay.from_csv(tmp_path / "grid.csv"), Replay.from_csv(FIXTURE)
    assert (back.num_layers, back.max_drop, back.reference_ms) == (3, 2.0, 100.0)
    for config, m in original.table.items():
        b = back.table[config]
        assert (b.speedup, b.drop_points, b.objective_accuracy) == pytest.approx(
            (m.speedup, m.drop_points, m.objective_accuracy))
        assert b.speedup_interval.ends() == pytest.approx(m.speedup_interval.ends())
        assert b.drop_upper == pytest.approx(m.drop_upper)
    stored = Replay.of(study)  # the stored-study route still answers the same
    assert stored.reference_ms == 100.0 and stored.table[TARGET].speedup == pytest.approx(2.30)


def test_the_grid_table_and_its_readme_are_written(tmp_path):
    study = _stored_grid(f"sqlite:///{tmp_path}/grid.db")
    csv_path, md_path = write(study, tmp_path, "poptune grid --model tiny-fixture")
    assert csv_path.name == "grid-tiny-fixture-cpu-fixture-2t.csv" and len(read_grid(csv_path).measurements) == 16
    text = md_path.read_text()
    for part in ("complete: every configuration", "## How it was measured", "## Commands and wall time",
                 "--model tiny-fixture", "## How to cite", "| 2 | window-16 | 0 | 2.300"):
        assert part in text


def test_the_grid_command_refuses_bad_options_in_one_line(tmp_path, capsys):
    assert main(["grid", "--model", "no-such-model", "--out", str(tmp_path)]) == 2
    assert main(["grid", "--model", "tiny-llama", "--out", str(tmp_path / "missing")]) == 2
    assert main(["grid", "--model", "tiny-llama", "--data-dir", str(tmp_path / "nodata"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("poptune grid: error: ") for line in err)
    assert not list(tmp_path.glob("*.csv"))
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_grid_command_writes_a_stored_grid_without_measuring(tmp_path, capsys):
    options = ["grid", "--model", "tiny-llama", "--tasks", "passkey", "--kv", "own", "--study",
               "tiny-fixture@cpu-fixture-2t"]
    study = _stored_grid(f"sqlite:///{tmp_path}/grid.db")
    # The problem the command makes of these options: the study's defaults, the tasks and K/V given.
    problem = TuningProblem(model="tiny-llama", tasks=("passkey",), kv=("own",), certify_limit=128)
    study.set_user_attr("problem", problem.to_dict())
    url = f"journal:{tmp_path}/grid.journal"
    optuna.copy_study(from_study_name=study.study_name, from_storage=f"sqlite:///{tmp_path}/grid.db",
                      to_storage=store.open_storage(url))
    assert main([*options, "--storage", url, "--table-only", "--out", str(tmp_path)]) == 0  # no model loaded
    assert len(read_grid(tmp_path / "grid-tiny-fixture-cpu-fixture-2t.csv").measurements) == 16
    text = (tmp_path / "grid-tiny-fixture-cpu-fixture-2t.md").read_text()
    assert "an Optuna journal file, `grid.journal` beside this file: the raw record" in text
    assert "--table-only" in text
    capsys.readouterr()
    # Nothing stored under that name, or other settings than the stored grid's: one line, exit 2, nothing written.
    other = tmp_path / "other"
    other.mkdir()
    assert main([*options[:-1], "nobody@nowhere", "--storage", url, "--table-only", "--out", str(other)]) == 2
    assert main([*options, "--limit", "3", "--storage", url, "--table-only", "--out", str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no grid study 'nobody@nowhere'" in err[0] and "other settings (limit)" in err[1]
    assert not list(other.iterdir())


def test_the_grid_is_stored_by_default_in_a_journal_beside_its_table(tmp_path):
    from poptune.tune.gridstudy import GridSpec, storage_of

    url = grid_storage("tiny-llama", "cpu", tmp_path)
    assert url.startswith("journal:") and url.endswith(".journal")
    path = Path(url.removeprefix("journal:"))
    assert path.parent == tmp_path / "raw" and path.name.startswith("grid-tiny-llama-cpu-")  # leaderboards/raw/
    spec = GridSpec(problem=TuningProblem(model="tiny-llama"), out=tmp_path)
    assert storage_of(spec) == url and storage_of(GridSpec(problem=spec.problem, storage="sqlite:///x.db")) == (
        "sqlite:///x.db")


def test_a_runs_command_is_shown_as_it_was_typed():
    from poptune.measure.provenance import Provenance

    def shown(command: list[str]) -> str | None:  # a run's recorded words, as the grid's README renders them
        return Provenance.from_dict({"command": command}).command

    assert shown(["benchmarks/build_grid.py", "--model", "x"]) == "python benchmarks/build_grid.py --model x"
    assert shown(["/venv/bin/poptune", "grid", "--model", "x"]) == "poptune grid --model x"
    assert shown(["/repo/poptune/__main__.py", "grid"]) == "poptune grid" and shown([]) == "python ?"


def test_a_tuner_spec_refuses_two_sources_or_a_build_of_a_grid_file():
    from poptune.reports.tunertable import TunerSpec

    with pytest.raises(ConfigError, match="not both"):
        TunerSpec(grid="g.csv", storage="sqlite:///g.db")
    with pytest.raises(ConfigError, match="does not go with `--grid`"):
        TunerSpec(grid="g.csv", build=True)
    with pytest.raises(ConfigError, match="`seeds` must be >= 1, got 0"):
        TunerSpec(seeds=0)


@pytest.mark.parametrize("replayed, expected", [
    ("grid-gemma-3-270m-cpu-amd-epyc-2t", "tuner-replay-gemma-3-270m-cpu-amd-epyc-2t"),
    ("gemma-3-270m@cpu-amd-epyc-2t", "tuner-replay-gemma-3-270m-cpu-amd-epyc-2t"),
    ("my grid", "tuner-replay-my_grid"),
])
def test_the_tuner_tables_default_name_follows_the_leaderboards_scheme(replayed, expected):
    from poptune.reports.tunertable import default_name

    assert default_name(replayed) == expected


def test_the_grid_readme_names_a_journal_under_raw(tmp_path):
    from poptune.reports.gridtable import _record

    csv_path = tmp_path / "grid-x-cpu.csv"
    assert "`raw/grid-x-cpu.journal` beside this file" in _record(
        f"journal:{tmp_path / 'raw' / 'grid-x-cpu.journal'}", csv_path)
    assert "`grid-x-cpu.journal` beside this file" in _record(f"journal:{tmp_path / 'grid-x-cpu.journal'}", csv_path)
