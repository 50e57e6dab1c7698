"""Progress of long measurements, told to whoever listens (a command's progress bars), never required.

Library code opens phases (:func:`phase`: the full model's accuracy, a trial's latency, its accuracy) and
counts work done in them (:func:`expect`, :func:`advance`: timing pairs, scored requests). A command installs a
:class:`Listener` around its work (:func:`listening`); without one every call is a no-op, so the library stays
silent. Phases nest: a listener sees the innermost one's label below its parents'.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol

__all__ = ["Listener", "listening", "phase", "expect", "advance", "note", "others_hushed"]


class Listener(Protocol):
    """What a command implements to show progress."""

    def start(self, label: str, unit: str, total: int | None) -> None:
        """A phase opened (nested in the phases still open)."""

    def expect(self, count: int) -> None:
        """The innermost phase has ``count`` more units of work than it knew."""

    def advance(self, count: int) -> None:
        """``count`` units of the innermost phase are done."""

    def end(self) -> None:
        """The innermost phase closed."""


_listener: ContextVar[Listener | None] = ContextVar("poptune_progress", default=None)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[Listener]:
    """Report this context's phases to ``listener``."""
    token = _listener.set(listener)
    try:
        yield listener
    finally:
        _listener.reset(token)


def note(line: str) -> None:
    """Tell the listener one line worth reading before the work it announces (a plan, what it will cost); a
    listener without ``note`` ignores it."""
    listener = _listener.get()
    say = getattr(listener, "note", None)
    if say is not None:
        say(line)


@contextlib.contextmanager
def phase(label: str, *, unit: str = "item", total: int | None = None) -> Iterator[None]:
    """A phase of work named ``label``, counted in ``unit`` (``total`` when known in advance)."""
    listener = _listener.get()
    if listener is not None:
        listener.start(label, unit, total)
    try:
        yield
    finally:
        if listener is not None:
            listener.end()


def expect(count: int) -> None:
    """The current phase has ``count`` more units of work (a scorer learns its request count late)."""
    listener = _listener.get()
    if listener is not None:
        listener.expect(count)


def advance(count: int = 1) -> None:
    """``count`` units of the current phase are done."""
    listener = _listener.get()
    if listener is not None:
        listener.advance(count)


@contextlib.contextmanager
def others_hushed(*loggers: str) -> Iterator[None]:
    """Within, while a listener shows progress: what other libraries write to ``sys.stderr`` (lm-eval's own
    progress bars) is dropped and the named ``loggers`` say only errors, so they do not tear the listener's
    bars. Without a listener, nothing changes; errors still raise."""
    if _listener.get() is None:
        yield
        return
    quieted = [logging.getLogger(name) for name in loggers]
    levels = [logger.level for logger in quieted]
    for logger in quieted:
        logger.setLevel(logging.ERROR)
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
            yield
    finally:
        for logger, level in zip(quieted, levels):
            logger.setLevel(level)
