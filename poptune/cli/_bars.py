"""A study's progress bars on the terminal (a :class:`poptune.progress.Listener`)."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Bars"]


class Bars:
    """A study's progress (:class:`poptune.progress.Listener`): one bar of measured configurations, whose ETA
    counts measured trials only, and one bar of the phase at work (the full model's reference, a trial's
    latency pairs and accuracy rounds, the checks), with its items or pairs so far."""

    def __init__(self, disable: bool) -> None:
        self.disable = disable
        self.trials: Any = None
        self.phase: Any = None
        self.stack: list[list[Any]] = []
        self.seconds: list[float] = []
        self.opened = False  # stays so when the study held its trials already (nothing measured)

    def open(self, done: int, budget: int) -> None:
        from tqdm import tqdm

        self.opened = True
        if self.disable:  # a worker started by --gpus: no bars
            return
        self.trials = tqdm(total=budget, initial=min(done, budget), desc="configurations measured", position=0,
                           bar_format="{desc}: {n_fmt}/{total_fmt} |{bar:16}| {elapsed}{postfix}")
        self.phase = tqdm(total=None, position=1, leave=False,
                          bar_format="  {desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}]")

    def write(self, line: str) -> None:
        (self.trials.write if self.trials is not None else print)(line)

    def note(self, line: str) -> None:
        """A line the study says before spending (:func:`poptune.progress.note`), printed above the bars."""
        self.write(line)

    def measured(self, seconds: float, best: str) -> None:
        """A measured trial finished: count it, and say the ETA from measured trials' mean duration."""
        self.seconds.append(seconds)
        if self.trials is None:
            return
        self.trials.update(1)
        left = self.trials.total - self.trials.n
        mean = sum(self.seconds) / len(self.seconds)
        eta = f"ETA {_minutes(mean * left)} ({_minutes(mean)} per measured trial)" if left > 0 else ""
        self.trials.set_postfix_str(", ".join(part for part in (best, eta) if part), refresh=True)

    def start(self, label: str, unit: str, total: int | None) -> None:
        self.stack.append([label, unit, total, 0])
        self._show(restart=True)

    def expect(self, count: int) -> None:
        if self.stack:
            self.stack[-1][2] = (self.stack[-1][2] or 0) + count
            self._show()

    def advance(self, count: int) -> None:
        if self.stack:
            self.stack[-1][3] += count
            if self.phase is not None:
                self.phase.update(count)

    def end(self) -> None:
        if self.stack:
            self.stack.pop()
        self._show()

    def _show(self, restart: bool = False) -> None:
        """The phase bar shows the innermost open phase, under its parents' labels."""
        if self.phase is None:
            return
        _, unit, total, done = self.stack[-1] if self.stack else ("", "step", None, 0)
        if restart:
            self.phase.start_t = time.time()  # elapsed counts from the phase's start (tqdm's clock)
        self.phase.total, self.phase.n, self.phase.unit = total, done, unit + "s" if unit else ""
        self.phase.set_description_str(" > ".join(entry[0] for entry in self.stack) or "between phases", refresh=False)
        self.phase.refresh()

    def close(self) -> None:
        for bar in (self.phase, self.trials):
            if bar is not None:
                bar.close()
        self.phase = self.trials = None


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s" if seconds >= 60 else f"{seconds:.0f} s"
