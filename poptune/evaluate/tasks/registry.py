"""The task pack's tasks by name: the one place that lists them, each with its contract (:class:`PackTask`).

A task is its documents' source (:class:`~poptune.evaluate.tasks.loaders.Source`: where they live, how a row is
read), its YAML template beside this module (``<name>.yaml``), and one line here: the metric its accuracy is read
from, what it scores (a choice, a generated answer, or the gold continuation's bits per byte) and the group it
belongs to. Everything that needs the pack's tasks -- the pack itself (:mod:`poptune.evaluate.taskpack`: its names,
groups and sources), the metric a run reads (``suite.PRIMARY_METRIC``), which tasks the likelihood judge can score
(:mod:`poptune.evaluate.judges`), the ``--tasks`` help of ``poptune eval`` -- reads it here.
"""

from __future__ import annotations

from dataclasses import dataclass

from poptune.evaluate.tasks import loaders, longctx
from poptune.evaluate.tasks.loaders import Source

__all__ = ["BITS", "CHOICE", "GENERATED", "GROUPS", "NAMES", "PACK", "PRIMARY", "PackTask", "generated", "help_text"]

#: What a task scores: the likelier of its choices (multiple choice).
CHOICE = "choice"
#: A generated answer, by the task's own metric (so the likelihood judge can score it too).
GENERATED = "generated"
#: The gold continuation's bits per byte (lower is better).
BITS = "bits per byte"


@dataclass(frozen=True)
class PackTask:
    """One task of the pack.

    Attributes:
        source: Its documents (the task's name is the source's).
        metric: The metric of lm-eval's results its accuracy is read from.
        scores: :data:`CHOICE`, :data:`GENERATED` or :data:`BITS`.
        group: The group name that stands for it and its siblings (None: none).
    """

    source: Source
    metric: str
    scores: str
    group: str | None = None

    @property
    def name(self) -> str:
        return self.source.task


_SHORT, _LONG = loaders.SOURCES, longctx.SOURCES

#: Every task of the pack, in the order the help lists them: a new task is a line here.
PACK: tuple[PackTask, ...] = (
    PackTask(_SHORT["piqa"], "acc_norm", CHOICE),
    PackTask(_SHORT["arc_easy"], "acc_norm", CHOICE),
    PackTask(_SHORT["arc_challenge"], "acc_norm", CHOICE),
    PackTask(_SHORT["hellaswag"], "acc_norm", CHOICE),
    PackTask(_SHORT["winogrande"], "acc", CHOICE),
    PackTask(_SHORT["boolq"], "acc", CHOICE),
    PackTask(_LONG["longctx_squad"], "f1", GENERATED, "longctx"),
    PackTask(_LONG["longctx_drop"], "f1", GENERATED, "longctx"),
    PackTask(_LONG["longctx_coqa"], "f1", GENERATED, "longctx"),
    PackTask(_LONG["longctx_gsm8k"], "exact_match", GENERATED, "longctx"),
    PackTask(_LONG["longctx_qasper"], "acc", CHOICE, "longctx"),
    PackTask(_LONG["longctx_squad_bpb"], "bpb", BITS, "longctx_bpb"),
    PackTask(_LONG["longctx_drop_bpb"], "bpb", BITS, "longctx_bpb"),
    PackTask(_LONG["longctx_coqa_bpb"], "bpb", BITS, "longctx_bpb"),
    PackTask(_LONG["longctx_gsm8k_bpb"], "bpb", BITS, "longctx_bpb"),
)

#: Their names, in that order.
NAMES: tuple[str, ...] = tuple(t.name for t in PACK)

#: Group names that stand for several tasks.
GROUPS: dict[str, tuple[str, ...]] = {
    g: tuple(t.name for t in PACK if t.group == g) for g in dict.fromkeys(t.group for t in PACK if t.group)}

#: The metric each task's accuracy is read from.
PRIMARY: dict[str, str] = {t.name: t.metric for t in PACK}


def generated() -> tuple[str, ...]:
    """The tasks that generate their answer (those the likelihood judge can score)."""
    return tuple(t.name for t in PACK if t.scores == GENERATED)


def help_text() -> str:
    """The pack's tasks as ``poptune eval --tasks`` lists them: the tasks outside a group, then each group's."""
    alone = ",".join(t.name for t in PACK if t.group is None)
    groups = " and ".join(f"{','.join(names)} (group: {group})" for group, names in GROUPS.items())
    return f"{alone}; {groups}"
