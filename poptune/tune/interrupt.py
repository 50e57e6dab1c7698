"""Stopping a study on SIGINT or SIGTERM: the running trial is failed at once, then one summary line.

:func:`interruptible` (the command line's, around a study) turns either signal into :class:`Interrupted`, a
:class:`KeyboardInterrupt`: Optuna fails the running trial and stops. :func:`marking_interrupted` (around the
objective) records ``fail_reason = "interrupted"`` on that trial and queues its configuration again, so that
running the same command resumes with it; a second signal gets the default behaviour (an immediate exit).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["INTERRUPTED", "Interrupted", "interruptible", "mark_interrupted", "marking_interrupted", "exit_code",
           "measured_point", "requeue_lost"]

#: The ``fail_reason`` of a trial stopped by a signal (not a fault of its configuration: it is measured again).
INTERRUPTED = "interrupted"

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(error: BaseException) -> int:
    """The shell's exit status of a process stopped by ``error``'s signal: 130 (SIGINT) or 143 (SIGTERM)."""
    return 128 + int(getattr(error, "signum", signal.SIGINT))


class _DropAfterSignal(logging.Filter):
    """Optuna logs the failed trial with its traceback; once a signal came, the summary line says it instead."""

    def __init__(self) -> None:
        super().__init__()
        self.signalled = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.signalled


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise :class:`Interrupted` in the main thread (the first one; then defaults)."""

    quiet = _DropAfterSignal()

    def handler(signum: int, frame: Any) -> None:
        quiet.signalled = True
        for number in _SIGNALS:
            signal.signal(number, signal.SIG_DFL if number == signal.SIGTERM else signal.default_int_handler)
        raise Interrupted(signum)

    previous = {number: signal.signal(number, handler) for number in _SIGNALS}
    logger = logging.getLogger("optuna.study._optimize")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
        for number, old in previous.items():
            signal.signal(number, old)


def marking_interrupted(study: Any, objective: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``objective`` that, when interrupted, marks its trial ``fail_reason = "interrupted"`` and queues its
    configuration again (Optuna then fails the trial and stops)."""

    def wrapped(trial: Any) -> Any:
        try:
            return objective(trial)
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):  # the storage may be what is failing; the trial fails regardless
                mark_interrupted(study, trial)
            raise

    return wrapped


def mark_interrupted(study: Any, trial: Any) -> None:
    """Record ``fail_reason = "interrupted"`` on a running ``trial`` and queue its configuration again (an
    interrupted trial says nothing of its configuration); the caller fails it."""
    trial.set_user_attr("fail_reason", INTERRUPTED)
    if measured_point(trial.params):
        study.enqueue_trial(dict(trial.params))  # not skip_if_exists: this trial holds them


def measured_point(params: dict[str, Any]) -> bool:
    """Whether trial parameters ``params`` name a whole point of the space: the full model's (``skip`` 0 alone)
    or a POP configuration's (``skip``, ``boundary`` and ``offset``); a trial interrupted before it wrote them all
    named none, and nothing of it is queued again."""
    return params.get("skip") == 0 or {"skip", "boundary", "offset"} <= set(params)


def requeue_lost(study: Any) -> list[int]:
    """Queue again each interrupted trial's point that no other trial holds (none completed, failed measuring,
    runs or waits with its parameters): what a study interrupted in its full model's trial lost before the full
    model's trial was queued again like any other. Returns the numbers of the trials whose point was queued."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)

    def holds(trial: Any) -> bool:  # measured, measuring, queued, or failed for good (a stale one was retried)
        return trial.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING) or (
            trial.state == TrialState.FAIL and trial.user_attrs.get("fail_reason") not in (None, INTERRUPTED))

    def held(params: dict[str, Any], number: int) -> bool:
        return any(t.number != number and (t.params == params or t.system_attrs.get("fixed_params") == params)
                   and holds(t) for t in trials)

    lost = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("fail_reason") == INTERRUPTED
            and measured_point(t.params) and not held(t.params, t.number)]
    points = {str(sorted(t.params.items())): t for t in lost}  # one each, however often interrupted
    for trial in points.values():
        study.enqueue_trial(dict(trial.params))
    return sorted(t.number for t in points.values())
