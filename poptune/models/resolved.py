"""A model name resolved once, at a command's edge, and passed down: what it names and its weights' identity.

A command resolves the model it is given once (:meth:`ResolvedModel.of`, which refuses an unknown name in one
line), and hands the object down; the layers below read its canonical name and source from it instead of
resolving the name again, and its weights' fingerprint is computed on first use (it reads the weights' files,
and for the embedded model its cache), once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from poptune.models.registry import ModelSpec, resolve_model, weights_fingerprint

__all__ = ["ResolvedModel"]


@dataclass(frozen=True)
class ResolvedModel:
    """A model name as resolved.

    Attributes:
        requested: The name as given (an alias, a hub name, a local directory); what loads the model.
        spec: What it resolves to (:class:`~poptune.models.registry.ModelSpec`).
        weights: ``pretrained`` or ``random``, as :func:`poptune.models.load_model`.
    """

    requested: str
    spec: ModelSpec
    weights: str = "pretrained"

    @classmethod
    def of(cls, name: str, weights: str = "pretrained") -> "ResolvedModel":
        """Resolve ``name`` once.

        Raises:
            ModelNotFoundError: an unknown name (a :class:`~poptune.errors.ConfigError`).
        """
        return cls(name, resolve_model(name), weights)

    @property
    def name(self) -> str:
        """The canonical poptune name (what studies and exports record)."""
        return self.spec.name

    @property
    def source(self) -> str:
        """``embedded``, ``hub``, ``local`` or ``tiny``."""
        return self.spec.source

    @cached_property
    def weights_fingerprint(self) -> str:
        """A short identity of the weights (:func:`~poptune.models.registry.weights_fingerprint`), computed once."""
        return weights_fingerprint(self.requested, self.weights)
