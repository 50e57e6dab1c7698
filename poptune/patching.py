"""Replacing a module's forward so that it composes with what is already there.

POP swaps the forward of the decoder (for as long as it is applied) and of some layers (for one prefill). A
module may already carry its own forward: an instance attribute a user set, or accelerate's hooks
(``device_map``, CPU/disk offload), which wrap the original forward as ``module._old_forward`` and move the
inputs and weights to the execution device around it. A :class:`Patch` builds the new forward around the one in
effect (the *inner* forward) and installs it where the original computation sits -- inside accelerate's hook,
or as the instance ``forward`` otherwise -- so those hooks keep running; :meth:`Patch.undo` restores exactly
what was there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from poptune.errors import PoptuneError

if TYPE_CHECKING:
    from torch import nn

__all__ = ["Patch", "attribute"]


def _slot(module: "nn.Module") -> str:
    """Where the module's own computation is called from: accelerate's ``_old_forward``, else ``forward``."""
    if getattr(module, "_hf_hook", None) is not None and "_old_forward" in vars(module):
        return "_old_forward"
    return "forward"


class Patch:
    """Install ``build(inner)`` as the forward of ``module``, where ``inner`` is the forward it replaces.

    Args:
        module: The module to patch.
        build: Given the forward in effect (a callable taking the module's forward arguments), returns the new one.
    """

    def __init__(self, module: "nn.Module", build: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.module = module
        self.slot = _slot(module)
        self._saved = vars(module).get(self.slot)  # None: the class's forward was in effect
        self.forward = build(getattr(module, self.slot))
        setattr(module, self.slot, self.forward)

    def undo(self) -> None:
        """Restore the forward that was in effect.

        Raises:
            PoptuneError: Something replaced the patched forward since, and restoring would undo that too.
        """
        current = vars(self.module).get(self.slot)
        if current is not self.forward:
            raise PoptuneError(
                f"the forward of {type(self.module).__name__} was replaced after POP patched it (by {current!r}): "
                "remove that hook first"
            )
        if self._saved is None:
            delattr(self.module, self.slot)
        else:
            setattr(self.module, self.slot, self._saved)


@contextlib.contextmanager
def attribute(owner: Any, name: str, value: Any) -> Iterator[Any]:
    """Set ``owner.name = value`` for the block; on exit restore what it was (removed if it had none)."""
    previous = getattr(owner, name, None)
    setattr(owner, name, value)
    try:
        yield value
    finally:
        if previous is None:
            delattr(owner, name)
        else:
            setattr(owner, name, previous)
