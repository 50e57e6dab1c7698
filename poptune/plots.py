"""Figures, written as PNG without a display (matplotlib's Agg backend, imported only when drawing)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PlotPoint", "attainment_steps", "place_labels", "pareto_plot", "pyplot", "save_figure"]


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as PNG: a temporary file beside the target, then a rename (no half-written image)."""
    from poptune.files import replacing

    plt = pyplot()
    target = Path(path)
    try:
        with replacing(target) as tmp:  # a short temporary name: a target near the 255-byte limit still fits
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return target


@dataclass(frozen=True)
class PlotPoint:
    """A measured configuration on a speedup/accuracy plot, with its 95% intervals (absolute ends)."""

    x: float
    y: float
    label: str = ""
    x_range: tuple[float, float] | None = None
    y_range: tuple[float, float] | None = None


def attainment_steps(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Corners of the attainment (step) line of a front where larger is better on both axes.

    The line bounds what the measured configurations attain: at speedup ``x`` the best accuracy of a
    configuration at least that fast. It falls vertically at each point's speedup and runs level to the next,
    so it never passes through a configuration that was not measured (a straight line between two front points
    would). Dominated points are ignored.
    """
    front = sorted({(x, y) for x, y in points if not any(
        ox >= x and oy >= y and (ox, oy) != (x, y) for ox, oy in points)})
    corners: list[tuple[float, float]] = []
    for x, y in front:
        if corners:
            corners.append((corners[-1][0], y))
        corners.append((x, y))
    return corners


#: Offsets (points) tried in turn for a label, right of its marker first.
_LABEL_OFFSETS = [(5, 4), (5, -11), (-5, 4), (-5, -11), (5, 14), (5, -21), (-5, 14), (-5, -21), (5, 24), (5, -31)]


def place_labels(ax: Any, points: Sequence[PlotPoint], fontsize: int = 7) -> list[Any]:
    """Annotate each labelled point where its text overlaps no label placed before it (a few offsets tried;
    the last one is kept when all overlap). Returns the annotations."""
    ax.autoscale_view()  # the limits the points give (an annotation outside them measures as empty)
    renderer = ax.figure.canvas.get_renderer()
    placed: list[Any] = []
    boxes: list[Any] = []
    for point in sorted((p for p in points if p.label), key=lambda p: (-p.y, p.x)):
        for dx, dy in _LABEL_OFFSETS:
            note = ax.annotate(point.label, (point.x, point.y), textcoords="offset points", xytext=(dx, dy),
                               fontsize=fontsize, ha="left" if dx > 0 else "right")
            box = note.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in boxes) or (dx, dy) == _LABEL_OFFSETS[-1]:
                break
            note.remove()
        placed.append(note)
        boxes.append(box)
    return placed


def pareto_plot(
    points: Sequence[tuple[float, float, str]],
    front: Sequence[tuple[float, float, str] | PlotPoint],
    path: str | Path,
    *,
    title: str,
    xlabel: str = "prefill speedup vs full model (x)",
    ylabel: str = "mean accuracy (%)",
    series: Mapping[str, Sequence[tuple[float, float, str]]] | None = None,
    references: dict[str, PlotPoint] | None = None,
    budget: tuple[float, str] | None = None,
) -> Path:
    """Speedup (x) against accuracy (y): every measured point, the Pareto front as a step line, labelled.

    Args:
        points: ``(speedup, accuracy %, label)`` of every measured configuration.
        front: The Pareto-optimal subset: its attainment step line (:func:`attainment_steps`), its points with
            error bars where they carry intervals, and labels that do not overlap.
        path: Where to write the PNG (written to a temporary file first, then renamed).
        series: Other methods to draw beside POP (name -> points), e.g. baselines.
        references: Reference configurations marked by name (the full model, the paper's rule).
        budget: ``(accuracy %, label)``: the accuracy budget drawn as a horizontal line.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=18, color="#9db4d6", label="POP trials")
    marked = [p if isinstance(p, PlotPoint) else PlotPoint(*p) for p in front]
    steps = attainment_steps([(p.x, p.y) for p in marked])
    ax.plot([x for x, _ in steps], [y for _, y in steps], "-", color="#1f4e96", lw=1.2, label="POP Pareto front")
    _error_bars(ax, marked, color="#1f4e96", marker="o", label=None)
    for (name, point), marker in zip((references or {}).items(), ("s", "D", "^", "v")):
        _error_bars(ax, [point], color="#b8412c" if marker == "D" else "#2f7d32", marker=marker, label=name)
    for name, values in (series or {}).items():
        ax.scatter([p[0] for p in values], [p[1] for p in values], s=30, marker="x", label=name)
    if budget is not None:
        ax.axhline(budget[0], color="#b8412c", ls="--", lw=1, label=budget[1])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    place_labels(ax, marked)
    return save_figure(fig, path)


def _error_bars(ax: Any, points: Sequence[PlotPoint], *, color: str, marker: str, label: str | None) -> None:
    """Points with their intervals as error bars (none where a point has no interval)."""
    for i, p in enumerate(points):
        xerr = [[p.x - p.x_range[0]], [p.x_range[1] - p.x]] if p.x_range else None
        yerr = [[p.y - p.y_range[0]], [p.y_range[1] - p.y]] if p.y_range else None
        ax.errorbar([p.x], [p.y], xerr=xerr, yerr=yerr, fmt=marker, color=color, ms=5, capsize=2, lw=0.8,
                    label=label if i == 0 else None)
