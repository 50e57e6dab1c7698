"""What a measurement runs on: a resolved model on a device of this machine, with the machine's fingerprint.

A command builds one :class:`ResolvedTarget` at its edge and passes it down: the model is resolved once
(:class:`poptune.models.resolved.ResolvedModel`) and the hardware fingerprinted once, on first use, however many
layers below ask for the study's name or record what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from poptune.measure.hardware import HardwareRecord, fingerprint
from poptune.models.resolved import ResolvedModel

__all__ = ["ResolvedTarget"]


@dataclass(frozen=True)
class ResolvedTarget:
    """A resolved model and the device it runs on.

    Attributes:
        model: The model, resolved once.
        device: The device argument (``cpu``, ``cuda``, ``cuda:1``).
    """

    model: ResolvedModel
    device: str = "cpu"

    @classmethod
    def of(cls, name: str, *, weights: str = "pretrained", device: str = "cpu") -> "ResolvedTarget":
        """Resolve model ``name`` (an unknown one fails here, in one line) for ``device``."""
        return cls(ResolvedModel.of(name, weights), device)

    @cached_property
    def hardware(self) -> HardwareRecord:
        """This machine's fingerprint for the device (:func:`poptune.measure.hardware.fingerprint`), taken once."""
        return fingerprint(self.device)

    @property
    def hardware_id(self) -> str:
        return self.hardware.hardware_id

    def matches(self, model: str, weights: str, device: str) -> bool:
        """Whether this is the target of a problem's ``model``, ``weights`` and ``device``."""
        return (self.model.requested, self.model.weights, self.device) == (model, weights, device)
