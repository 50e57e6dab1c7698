"""The study report renders as it did before the report model: the terminal text, the Markdown summary and the
plot's inputs of two stored studies are compared with golden files (``golden/make_golden.py`` wrote them at
commit ca4c9a0, before :class:`~poptune.reports.study_report.StudyReport`; rewritten by the same renderer when the
certification's
lines came to state their bound, issue 45)."""

from __future__ import annotations

import contextlib
import io
import shutil
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: Golden name -> the stored study (journal file) it renders: a synthetic one with a certification, and the
#: committed grid study (an older study, stored before the certification existed).
STUDIES = {
    "fake": HERE / "golden" / "fake-study.journal",
    "grid": ROOT / "leaderboards" / "raw" / "grid-gemma-3-270m-cpu-amd-epyc-2t.journal",
}


def render(journal: Path, folder: Path) -> dict[str, str]:
    """What ``poptune study`` prints for the study in ``journal`` (paths under ``folder`` shown as ``FOLDER``),
    the summary it writes, and the points its plot draws."""
    import poptune.plots
    from poptune import store
    from poptune.cli.study import _report

    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / journal.name
    shutil.copyfile(journal, copy)
    study = store.read_study(f"journal:{copy}", None)
    drawn: list[str] = []
    real = poptune.plots.pareto_plot

    def recording(points, front, path, **kwargs):
        drawn.append(repr((points, front, Path(path).name, sorted(kwargs.items()))))
        return real(points, front, path, **kwargs)

    poptune.plots.pareto_plot = recording
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            _report(study, types.SimpleNamespace(trials=8, storage=f"journal:{copy}"), complete_already=False)
    finally:
        poptune.plots.pareto_plot = real
    md = next(folder.glob("*.md")).read_text()
    return {"txt": out.getvalue().replace(str(folder), "FOLDER"), "md": md, "plot": "\n".join(drawn) + "\n"}


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_the_report_renders_as_before(name, tmp_path):
    assert STUDIES[name].exists(), f"the committed study {STUDIES[name]} is missing"
    rendered = render(STUDIES[name], tmp_path)
    for suffix, text in rendered.items():
        assert text == (HERE / "golden" / f"{name}.{suffix}").read_text(), f"{name}.{suffix} differs"


def test_the_report_reads_the_study_once_and_renders_without_it(tmp_path, monkeypatch):
    from poptune import store
    from poptune.reports.study_report import StudyReport

    copy = tmp_path / "s.journal"
    shutil.copyfile(STUDIES["fake"], copy)
    study = store.read_study(f"journal:{copy}", None)
    built = StudyReport.of(study)

    def gone(*args, **kwargs):
        raise AssertionError("a rendering read the study again")

    for name in ("get_trials", "set_user_attr"):
        monkeypatch.setattr(study, name, gone)
    monkeypatch.setattr(type(study), "user_attrs", property(gone))
    monkeypatch.setattr(type(study), "trials", property(gone))
    text, md = built.text(), built.markdown("p.png")
    _, png = built.write(tmp_path)
    assert text.startswith("study fake: 8 measured") and md.startswith("# Study fake") and png.exists()
