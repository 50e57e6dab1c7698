"""The model-transform contract: a reversible change to a loaded model, applied around the calls it affects.

The baselines (:mod:`poptune.baselines.surgery`) implement it; the timer (:mod:`poptune.measure.bench`)
applies one around every call of the measured side and undoes it for the full model's calls, so one loaded
model serves both, interleaved call by call.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

__all__ = ["Transform", "applied"]


class Transform:
    """A reversible change to a model: ``with t.applied(model): ...``."""

    def applied(self, model: "nn.Module") -> contextlib.AbstractContextManager[None]:  # pragma: no cover
        """Change ``model`` while inside the block; give it back as it was on exit, also after an exception."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:  # pragma: no cover
        """What the transform does, JSON-serialisable (stored with the measurement)."""
        raise NotImplementedError


def applied(model: "nn.Module", transform: Transform | None) -> contextlib.AbstractContextManager[None]:
    """``transform.applied(model)``, or nothing for None."""
    return contextlib.nullcontext() if transform is None else transform.applied(model)
