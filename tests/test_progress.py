"""Progress reporting: phases reach a listener, nothing happens without one, other libraries are hushed."""

from __future__ import annotations

import logging
import sys

from poptune import progress


class Record:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def start(self, label, unit, total):
        self.events.append(("start", label, unit, total))

    def expect(self, count):
        self.events.append(("expect", count))

    def advance(self, count):
        self.events.append(("advance", count))

    def end(self):
        self.events.append(("end",))


def test_phases_and_counts_reach_the_listener_in_order():
    record = Record()
    with progress.listening(record):
        with progress.phase("trial 3", unit="step"):
            with progress.phase("latency", unit="pair", total=4):
                progress.advance()
            progress.expect(8)
            progress.advance(2)
    assert record.events == [("start", "trial 3", "step", None), ("start", "latency", "pair", 4), ("advance", 1),
                             ("end",), ("expect", 8), ("advance", 2), ("end",)]


def test_without_a_listener_every_call_is_a_no_op(capsys):
    with progress.phase("anything"):
        progress.expect(3)
        progress.advance(3)
        with progress.others_hushed("lm_eval"):
            print("still here", file=sys.stderr)
    assert capsys.readouterr().err == "still here\n"


def test_other_libraries_are_hushed_while_a_listener_shows_progress(capsys):
    logger = logging.getLogger("lm_eval")
    before = logger.level
    with progress.listening(Record()), progress.others_hushed("lm_eval"):
        print("a third-party progress bar", file=sys.stderr)
        assert logger.level == logging.ERROR
    assert capsys.readouterr().err == "" and logger.level == before
