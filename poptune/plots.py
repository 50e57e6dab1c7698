"""Figures, written as PNG without a display (matplotlib's Agg backend, imported only when drawing)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from poptune.errors import ConfigError

__all__ = ["pareto_plot", "pyplot", "save_figure"]


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as PNG: a temporary file beside the target, then a rename (no half-written image)."""
    plt = pyplot()
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp.png")
    try:
        fig.savefig(tmp)
        tmp.replace(target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {target}: {e.strerror or e}") from e
    finally:
        plt.close(fig)
    return target


def pareto_plot(
    points: Sequence[tuple[float, float, str]],
    front: Sequence[tuple[float, float, str]],
    path: str | Path,
    *,
    title: str,
    xlabel: str = "prefill speedup vs full model (x)",
    ylabel: str = "mean accuracy (%)",
    series: dict[str, Sequence[tuple[float, float, str]]] | None = None,
) -> Path:
    """Speedup (x) against accuracy (y): every measured point, the Pareto front as a line, labelled.

    Args:
        points: ``(speedup, accuracy %, label)`` of every measured configuration.
        front: The Pareto-optimal subset, drawn as a step line with labels.
        path: Where to write the PNG (written to a temporary file first, then renamed).
        series: Other methods to draw beside POP (name -> points), e.g. baselines.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=18, color="#9db4d6", label="POP trials")
    ordered = sorted(front)
    ax.plot([p[0] for p in ordered], [p[1] for p in ordered], "-o", color="#1f4e96", label="POP Pareto front")
    for x, y, label in ordered:
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    for name, values in (series or {}).items():
        ax.scatter([p[0] for p in values], [p[1] for p in values], s=30, marker="x", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
