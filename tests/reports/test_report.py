"""What a study tells its user: the front within its budget, the reference rows, the summary file and the plot.
A synthetic evaluator stands in for the model (see ``test_trust``)."""

from __future__ import annotations

import re

import optuna
import pytest

from poptune import store
from poptune.env import TuningProblem
from poptune.plots import PlotPoint, attainment_steps, place_labels, pyplot
from poptune.reports import study_report as report
from poptune.tune.study import StudySpec, run_study

from ..tune.fakes import FakeEvaluator, quiet_timing  # noqa: F401  (the fixture is autouse)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(tmp_path, max_drop: float | None, trials: int = 8):
    problem = TuningProblem(model="tiny-llama", tasks=("piqa",), lengths=(16,), decode_tokens=8, max_drop=max_drop)
    spec = StudySpec(problem=problem, trials=trials, sampler="grid", storage=f"sqlite:///{tmp_path}/s.db")
    return run_study(spec, evaluator=FakeEvaluator(problem))


def test_the_front_keeps_to_the_budget_and_the_references_say_why(tmp_path):
    # The synthetic drop is about 1 point per skipped layer: within 1.5 points only skip 1 (and the full model).
    study = _study(tmp_path, max_drop=1.5)
    rows = store.front(study)
    assert rows and all(r.drop <= 1.5 for r in rows) and {r.skip for r in rows} <= {0, 1}
    full, paper = report.references(study, rows)
    assert (full.name, full.row.skip) == ("full model", 0) and abs(full.row.drop) < 0.1
    assert full.status == "on the front" or full.status.startswith("off the front: trial")
    assert (paper.name, paper.row.skip, paper.row.boundary) == ("paper's rule", 2, "last")
    assert re.fullmatch(r"off the front: drop's 95% lower bound \+2\.\d\d > budget 1\.50 points", paper.status)
    table = report.front_table(rows, [full, paper], reference_ms=100.0)
    header = table.splitlines()[0]
    assert "TTFT ms" in header and "full ms" in header and "objective ms" in header
    assert "references:" in table and "paper's rule: off the front: drop's 95% lower bound" in table
    # the verdict comes from the fresh items: skip 1's synthetic drop (about 1 point, +-1) is undecided at 1.5
    certified = store.certified(study)
    cap = TuningProblem().certify_limit  # the fake certification scores the cap's fresh items of its one task
    assert certified and certified[0].skip == 1 and certified[0].items == cap
    assert certified[0].verdict == f"undecided at {cap} items"
    assert report.verdict_line(study).startswith("verdict: no configuration is certified within the budget")


def test_without_a_budget_the_front_shows_every_trade_off(tmp_path):
    rows = store.front(_study(tmp_path, max_drop=None))
    assert max(r.drop for r in rows) > 1.5  # deeper skips are faster: on the front when nothing bounds the drop


def test_the_summary_and_the_plot_are_written_side_by_side(tmp_path):
    study = _study(tmp_path, max_drop=1.5)
    md, png = report.StudyReport.of(study).write(tmp_path)
    text = md.read_text()
    assert png.exists() and png.stat().st_size > 10_000 and md.parent == png.parent
    assert text.startswith(f"# Study {study.study_name}")
    assert "## Verdict: the front's candidates certified on fresh items" in text and "## Search front" in text
    assert "| paper's rule |" in text and "| full model |" in text and "| verdict |" in text
    assert "- accuracy budget: drop's upper bound <= 1.5 points, certified on fresh items (at most 2.5% error" in text
    assert "- run 1: " in text and " min " in text  # the run's duration
    assert f"![speedup vs accuracy]({png.name})" in text


def test_the_attainment_line_steps_down_at_each_front_point():
    points = [(1.0, 80.0), (1.4, 76.0), (1.2, 78.0), (1.1, 70.0)]  # (1.1, 70) is dominated by (1.2, 78)
    assert attainment_steps(points) == [(1.0, 80.0), (1.0, 78.0), (1.2, 78.0), (1.2, 76.0), (1.4, 76.0)]
    assert attainment_steps([(1.3, 75.0)]) == [(1.3, 75.0)]
    assert attainment_steps([]) == []


def test_labels_of_crowded_points_do_not_overlap():
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4, 3))
    points = [PlotPoint(1.0 + 0.002 * i, 70.0 - 0.01 * i, f"{i}/window-16/2") for i in range(5)]
    ax.scatter([p.x for p in points], [p.y for p in points])
    ax.set_xlim(0.9, 2.0)
    ax.set_ylim(0.0, 100.0)  # the five points within a few pixels of each other
    notes = place_labels(ax, points)
    boxes = [n.get_window_extent(fig.canvas.get_renderer()) for n in notes]
    assert len(notes) == 5
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    plt.close(fig)


def test_the_same_study_again_finishes_at_once_and_add_grows_it(tmp_path, monkeypatch):
    study = _study(tmp_path, max_drop=None, trials=4)

    def measured(s):
        return [t for t in store.completed(s) if not {"reused_from", "remeasure_of"} & set(t.user_attrs)]

    assert len(measured(study)) == 4

    def no_model(problem):
        raise AssertionError("a study that holds its trials must not load the model")

    monkeypatch.setattr("poptune.tune.study.ConfigEvaluator", no_model)
    spec = StudySpec(problem=TuningProblem.from_dict(study.user_attrs["problem"]), trials=4, sampler="grid",
                     storage=f"sqlite:///{tmp_path}/s.db")
    again = run_study(spec)
    assert len(measured(again)) == 4 and len(again.trials) == len(study.trials)
    grown = run_study(StudySpec(problem=spec.problem, add=2, sampler="grid", storage=spec.storage),
                      evaluator=FakeEvaluator(spec.problem))
    assert len(measured(grown)) == 6


@pytest.mark.parametrize("argv, expected", [
    ([], (8, 8, 32, 20, 3.0, 128)),
    (["--preset", "quick"], (4, 8, 16, 10, 2.0, 64)),
    (["--preset", "thorough", "--items", "4", "--trials", "30"], (30, 4, 64, 40, 6.0, 512)),
])
def test_presets_size_a_study_and_explicit_options_win(argv, expected):
    from poptune.cli import build_parser
    from poptune.problem.presets import STANDARD, sized

    args = build_parser().parse_args(["study", *argv])  # the command's flags, as it parses them
    p = sized(args.preset, trials=args.trials, items=args.items, limit=args.limit, max_pairs=args.max_pairs,
              max_seconds=args.max_seconds)
    assert (p.trials, p.items, p.limit, p.max_pairs, p.max_seconds, p.certify) == expected
    default = TuningProblem()
    assert (default.items_start, default.limit, default.max_pairs, default.max_seconds) == (
        STANDARD.items, STANDARD.limit, STANDARD.max_pairs, STANDARD.max_seconds)
    assert StudySpec(problem=default).trials == STANDARD.trials


def _copies(tmp_path, *names):
    """Copies of the golden fixture study (named ``fake``) in ``tmp_path``, with their storage URLs."""
    import shutil

    from .test_golden import STUDIES

    for name in names:
        shutil.copyfile(STUDIES["fake"], tmp_path / name)
    return [f"journal:{tmp_path / name}" for name in names]


def test_two_studies_in_one_folder_keep_two_reports(tmp_path):
    # Issue 57: reports were named after the study alone, so a second storage's study of the same name replaced
    # the first's report.
    written = [report.StudyReport.of(store.read_study(url, None)).write(tmp_path, url)
               for url in _copies(tmp_path, "a.journal", "b.journal")]
    (md_a, png_a), (md_b, png_b) = written
    assert len({md_a, md_b, png_a, png_b}) == 4 and all(p.exists() for p in (md_a, md_b, png_a, png_b))
    assert md_a.name == "a.fake.md" and md_b.name == "b.fake.md"
    assert md_a.read_text().rstrip().endswith('{"storage": "a.journal", "study": "fake"} -->')
    again = report.StudyReport.of(store.read_study(f"journal:{tmp_path / 'a.journal'}", None)).write(tmp_path,
                                f"journal:{tmp_path / 'a.journal'}")
    assert again == (md_a, png_a)  # a study's own report is rewritten in place


def test_a_report_never_replaces_another_studys(tmp_path):
    from poptune.reports.naming import owner_line, report_paths

    # names that clean alike ("a=b", "a<newline>b") and storages of one stem (s.db, s.journal) get two names
    md, _ = report_paths(tmp_path, "sqlite:///s.db", "a=b")
    md.write_text("# Study a=b\n\n" + owner_line("sqlite:///s.db", "a=b") + "\n")
    other, _ = report_paths(tmp_path, "sqlite:///s.db", "a\nb")
    assert md.name == "s.a_b.md" and other != md and other.name.startswith("s.a_b-")
    assert report_paths(tmp_path, "journal:s.journal", "a=b")[0] not in (md, other)
    assert report_paths(tmp_path, "sqlite:///s.db", "a=b")[0] == md  # its own: the same name again
    # a file of that name that names no study (the user's own notes) is not replaced either
    notes = tmp_path / "s.fake.md"
    notes.write_text("my notes\n")
    (url,) = _copies(tmp_path, "s.journal")
    md_x, _ = report.StudyReport.of(store.read_study(url, None)).write(tmp_path, url)
    assert md_x != notes and notes.read_text() == "my notes\n"


def test_a_likelihood_study_names_its_column_axis_and_budget_line_by_what_they_are(tmp_path, monkeypatch):
    import poptune.plots as plots
    from poptune.evaluate.judges import likelihood_task

    problem = TuningProblem(model="tiny-llama", tasks=(likelihood_task("passkey"),), lengths=(16,), decode_tokens=8,
                            max_drop=1.5)
    spec = StudySpec(problem=problem, trials=4, sampler="grid", storage=f"sqlite:///{tmp_path}/s.db")
    study = run_study(spec, evaluator=FakeEvaluator(problem))
    built = report.StudyReport.of(study)
    header = built.text().split("search front")[1].splitlines()[2]
    assert "answer prob" in header and " accuracy " not in f" {header} "
    seen = {}
    monkeypatch.setattr(plots, "pareto_plot", lambda *a, **k: seen.update(k) or tmp_path / "p.png")
    built.plot(tmp_path / "p.png")
    assert seen["ylabel"] == "mean probability of the full answer's tokens (%)"
    assert seen["budget"][1].startswith("likelihood budget: drop <= 1.5 points") and "95%" not in seen["budget"][1]
    (tmp_path / "a").mkdir()
    accuracy = report.StudyReport.of(_study(tmp_path / "a", max_drop=1.5))
    monkeypatch.setattr(plots, "pareto_plot", lambda *a, **k: seen.update(k) or tmp_path / "p.png")
    accuracy.plot(tmp_path / "q.png")
    assert seen["ylabel"] == "mean accuracy (%)" and seen["budget"][1].startswith("accuracy budget")
