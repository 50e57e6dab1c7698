"""The task pack's registry (issue 88, item 4): the pack's names and groups, the metric a run reads, the tasks the
likelihood judge can score and ``poptune eval --tasks``'s help are all read from it, one line per task."""

from __future__ import annotations

from poptune.evaluate import judges, taskpack
from poptune.evaluate.suite import PRIMARY_METRIC
from poptune.evaluate.tasks import registry


def test_the_pack_is_the_registry():
    assert taskpack.TASKS == registry.NAMES and set(taskpack.SOURCES) == set(registry.NAMES)
    assert taskpack.GROUPS == registry.GROUPS and set(taskpack.expand(["longctx"])) == set(registry.GROUPS["longctx"])
    assert all(PRIMARY_METRIC[t.name] == t.metric for t in registry.PACK)
    assert all(t.source.task == t.name for t in registry.PACK)


def test_what_a_task_scores_says_which_judges_take_it():
    generated = {t.name for t in registry.PACK if t.scores == registry.GENERATED}
    assert generated and generated <= set(judges.JUDGEABLE)
    assert not {t.name for t in registry.PACK if t.scores != registry.GENERATED} & set(judges.JUDGEABLE)
    assert {t.metric for t in registry.PACK if t.scores == registry.BITS} == {"bpb"}


def test_the_help_names_every_task_and_group(monkeypatch):
    text = registry.help_text()
    assert all(name in text for name in registry.NAMES) and all(f"group: {g}" in text for g in registry.GROUPS)
    extra = registry.PackTask(registry.PACK[0].source, "acc", registry.CHOICE, "extra")
    monkeypatch.setattr(registry, "PACK", (*registry.PACK, extra))
    monkeypatch.setattr(registry, "GROUPS", {**registry.GROUPS, "extra": (extra.name,)})
    assert "(group: extra)" in registry.help_text()  # a new line of the registry is offered by the help
