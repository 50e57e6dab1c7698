"""What a task pack's drop is on: its task's accuracy (the default), or the likelihood of the full model's answer.

``--judge likelihood`` on a task pack makes each task ``T`` that generates its answer the task ``T:likelihood``
(:func:`likelihood_task`): the same items in the same fixed order, each read as a prompt request
(:func:`poptune.evaluate.workload.task_requests`: the item's prompt text, ``max_tokens`` = the task's generation
length, ``stop`` = its stop sequences) and scored as a user's prompts are under ``--judge likelihood``
(:func:`poptune.evaluate.answers.score_requests`, task :data:`~poptune.evaluate.prompts.LIKELIHOOD`): per item,
the mean probability of the *full* model's greedy answer tokens, teacher-forced after the configuration's prefill,
in [0, 1]; the full model's own is its side of the pair. The budget (``--max-drop``, points) then bounds the
paired drop of that mean probability, x100: a continuous outcome that needs far fewer items than accuracy
(a long-prompt study decides on a CPU), but not an accuracy claim. A study is judged one way: its tasks are all
``:likelihood`` or none (:func:`check_one_judge`).

The tasks that can be judged so (:data:`LIKELIHOOD_TASKS`) are those that generate an answer: the long-prompt
pack's generation tasks and the embedded synthetic ones. Multiple-choice tasks (the six short ones, QASPER) and
the bits-per-byte tasks have no answer to generate and are refused (:func:`judged_tasks`).
"""

from __future__ import annotations

from collections.abc import Sequence

from poptune.errors import ConfigError
from poptune.evaluate.synthetic import EMBEDDED
from poptune.evaluate.tasks import registry

__all__ = ["ACCURACY_JUDGE", "JUDGEABLE", "LIKELIHOOD_JUDGE", "LIKELIHOOD_TASKS", "SUFFIX", "base_task",
           "check_one_judge", "judge_of", "judged_tasks", "likelihood_task"]

#: The default judge of a task pack: each task's own metric (its accuracy).
ACCURACY_JUDGE = "accuracy"

#: ``--judge`` value that makes a task pack's drop the drop of the full answer's likelihood.
LIKELIHOOD_JUDGE = "likelihood"

#: What a task's name gets under the likelihood judge.
SUFFIX = ":likelihood"

#: Tasks that generate an answer, so can be judged by its likelihood (the long pack's generation tasks, embedded).
JUDGEABLE: tuple[str, ...] = (*registry.generated(), *EMBEDDED)


def likelihood_task(task: str) -> str:
    """``longctx_squad`` -> ``longctx_squad:likelihood``: the task judged by the full answer's likelihood."""
    return task + SUFFIX


#: Likelihood-judged task name -> the task whose items it scores.
LIKELIHOOD_TASKS: dict[str, str] = {likelihood_task(t): t for t in JUDGEABLE}


def base_task(task: str) -> str:
    """The task whose items ``task`` scores (itself unless likelihood-judged)."""
    return LIKELIHOOD_TASKS.get(task, task)


def judge_of(tasks: Sequence[str]) -> str:
    """``likelihood`` when ``tasks`` are likelihood-judged task-pack tasks, else ``accuracy``."""
    return LIKELIHOOD_JUDGE if tasks and all(t in LIKELIHOOD_TASKS for t in tasks) else ACCURACY_JUDGE


def judged_tasks(tasks: Sequence[str], *, defaults: bool = False) -> tuple[str, ...]:
    """``tasks`` judged by likelihood (their ``:likelihood`` names).

    Args:
        tasks: Task-pack task names.
        defaults: ``tasks`` are the study's defaults, not the user's: those that cannot be judged so are left out
            (QASPER of the long-prompt defaults) instead of refused.

    Raises:
        ConfigError: A task with no answer to generate (multiple choice, bits per byte), or none left.
    """
    cannot = [t for t in tasks if t not in JUDGEABLE]
    if cannot and not defaults:
        raise ConfigError(f"`--judge likelihood` scores the full model's generated answer, and task(s) "
                          f"{', '.join(cannot)} generate none (multiple choice or bits per byte): judge them by "
                          f"accuracy, or give --tasks among {', '.join(JUDGEABLE)}")
    kept = tuple(likelihood_task(t) for t in tasks if t in JUDGEABLE)
    if not kept:
        raise ConfigError(f"`--judge likelihood` needs a task that generates its answer: {', '.join(JUDGEABLE)}")
    return kept


def check_one_judge(tasks: Sequence[str]) -> None:
    """A study's drop is on one judge: likelihood-judged tasks never beside accuracy-judged ones.

    Raises:
        ConfigError: a mix, or a ``:likelihood`` name of a task that cannot be judged so.
    """
    unknown = [t for t in tasks if t.endswith(SUFFIX) and t not in LIKELIHOOD_TASKS]
    if unknown:
        raise ConfigError(f"task(s) {', '.join(unknown)} cannot be judged by likelihood (no generated answer); "
                          f"these can: {', '.join(JUDGEABLE)}")
    judged = [t in LIKELIHOOD_TASKS for t in tasks]
    if any(judged) and not all(judged):
        raise ConfigError(f"a study's drop is judged one way: tasks {', '.join(tasks)} mix likelihood-judged and "
                          "accuracy-judged ones (the two are never one claim)")
