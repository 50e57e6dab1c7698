"""Shared-trunk scoring: the full model and several POP configurations scored on the same batches.

Every POP configuration computes the layers below its skipped block exactly as the full model does: POP
changes nothing there. When the full model and configurations ``c_1 .. c_K`` are all to be scored on the same
items, each batch of them therefore needs the trunk once:

1. the full model scores the batch as usual, and its prefill keeps every layer's input
   (:class:`~poptune.engine.prefix.PrefixStates`, held for this one batch only);
2. each configuration then scores the same batch: its prefill replays the layers below its block from those
   states (each such layer only writes its K/V), computes its own layers -- the skipped layers' K/V from the
   block's input, the boundary tokens' deep path, the layers above an offset block -- and decodes at full depth;
   a greedy generation (:class:`Generation`) decodes every configuration's rows and the full model's as one
   stacked batch (:mod:`poptune.engine.joint`): a small batch's decode step costs about what reading the
   weights costs, so ``K`` configurations' steps cost little more than one's;
3. the states are dropped; the configurations' outputs wait, keyed by the batch's exact inputs, until their
   own scoring asks for that batch.

So scoring code keeps its shape -- one configuration at a time, the full model first -- and the batch loops
that score a configuration (lm-eval's requests, the synthetic tasks' generations) ask the trunk instead of
computing: :meth:`SharedTrunk.run`. A configuration asking for a batch the full model led gets its output
without computing it; any other call computes as it would have. The outputs are what the per-configuration
engine gives (the replayed path is the plain one's, :func:`poptune.engine.prefix.verify`):
``tests/engine/test_trunk.py`` compares them answer for answer.

    trunk = SharedTrunk([PopConfig(skip=5, boundary="window-64"), PopConfig(skip=6)])
    with trunk.attached(model):
        full = score(model, items)                    # leads: also scores both configurations, batch by batch
        with apply_pop(model, PopConfig(skip=6)):
            pop = score(model, items)                 # served: no forward at all

Memory: one batch's layer inputs at a time (``L x B x T x C``), the waiting outputs (token ids, a few
floats per request) and the stacked decode's caches, whose buffers are kept for the next batch
(:class:`~poptune.engine.joint.StackBuffers`, up to :data:`~poptune.engine.joint.STACK_BYTES`); never a task's
hidden states.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from poptune.engine import PopConfig, apply_pop, decoder_of, get_pop_config
from poptune.errors import ConfigError
from poptune.patching import attribute

if TYPE_CHECKING:
    from torch import nn

__all__ = ["Generation", "SharedTrunk", "attached_trunk", "batch_key"]

_ATTR = "_poptune_shared_trunk"

T = TypeVar("T")


def batch_key(*parts: Any) -> bytes:
    """A key of a batch's exact inputs: tensors by dtype, shape and bytes; anything else by its ``repr``."""
    h = hashlib.sha256()
    for part in parts:
        if hasattr(part, "detach") and hasattr(part, "shape"):
            h.update(f"t{part.dtype}{tuple(part.shape)}".encode())
            h.update(part.detach().cpu().contiguous().numpy().tobytes())
        else:
            h.update(b"r" + repr(part).encode())
        h.update(b"|")
    return h.digest()


def _name(config: PopConfig | None) -> str:
    """A configuration's identity (the full model: ``full``)."""
    if config is None or config.skip == 0:
        return "full"
    return json.dumps(config.to_dict(), sort_keys=True)


@dataclass(frozen=True)
class Generation:
    """What a batch's ``compute`` generates, for the trunk to decode the configurations together.

    ``compute`` must return exactly :func:`poptune.engine.joint.generate_together`'s sequence for these arguments
    (``segments.generate(model, inputs, chunk=chunk, stopping_criteria=stopping(), **kwargs)``); where that is
    not a bare greedy argmax, the trunk calls ``compute`` per configuration instead.
    """

    inputs: Mapping[str, Any]
    chunk: int | None = None
    stopping: Callable[[], Any] | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def attached_trunk(model: "nn.Module") -> "SharedTrunk | None":
    """The trunk attached to ``model`` (:meth:`SharedTrunk.attached`), or None."""
    return getattr(decoder_of(model), _ATTR, None)


class SharedTrunk:
    """The full model leads every batch it scores; ``configs`` follow on that batch's trunk.

    Args:
        configs: The POP configurations scored beside the full model (distinct, ``skip >= 1``).

    Attributes:
        led: Batches the full model led (computed for every configuration).
        served: Batches a configuration was served from the full model's lead.
        alone: Calls computed alone (a batch no lead covered, or a model outside ``configs``).
        together: Led batches whose generations were decoded as one batch (:mod:`poptune.engine.joint`).
    """

    def __init__(self, configs: Sequence[PopConfig]) -> None:
        from poptune.engine.joint import StackBuffers

        names = [_name(c) for c in configs]
        if any(not isinstance(c, PopConfig) for c in configs) or "full" in names:
            raise ConfigError("a shared trunk's configurations must be PopConfigs with skip >= 1")
        if len(set(names)) != len(names):
            raise ConfigError(f"a shared trunk's configurations must be distinct, got {[str(c) for c in configs]}")
        self.configs = tuple(configs)
        self._names = frozenset(names)
        self._waiting: dict[tuple[str, bytes], Any] = {}
        self._buffers = StackBuffers()  # the stacked decode's, kept from batch to batch
        self.led = self.served = self.alone = self.together = 0

    def __len__(self) -> int:
        """Outputs waiting for their configuration."""
        return len(self._waiting)

    def clear(self) -> None:
        """Drop the outputs still waiting (configurations that stopped before asking for them) and the stacked
        decode's buffers."""
        self._waiting.clear()
        self._buffers.clear()

    @contextlib.contextmanager
    def attached(self, model: "nn.Module", *, keep: bool = False) -> Iterator["SharedTrunk"]:
        """Let the scoring of ``model`` ask this trunk (:meth:`run`) while the block runs; waiting outputs are
        dropped on exit unless ``keep`` (a configuration scored in a later block still gets them)."""
        try:
            with attribute(decoder_of(model), _ATTR, self):
                yield self
        finally:
            if not keep:
                self.clear()

    def run(self, model: "nn.Module", key: bytes, compute: Callable[[], T],
            generation: Generation | None = None) -> T:
        """``compute()`` for the configuration applied to ``model`` on the batch ``key``, shared where possible.

        ``compute`` must score the batch under whatever configuration is applied to ``model`` when it is called
        (it is called again under each of :attr:`configs` when the full model leads) and must not apply one
        itself. The full model's call leads; a configuration's call is served what the lead left for it. A
        ``generation`` says what ``compute`` generates: the lead then decodes all configurations as one batch.
        """
        from poptune.engine.joint import generate_together
        from poptune.engine.prefix import PrefixStates

        me = _name(get_pop_config(model))
        waiting = self._waiting.pop((me, key), None)
        if waiting is not None:
            self.served += 1
            return waiting
        if me != "full" or not self.configs:
            self.alone += 1
            return compute()
        states = PrefixStates(max_bytes=1 << 62)  # one batch: bounded by the batch itself
        with states.attached(model):
            outs: list[Any] | None = None if generation is None else generate_together(
                model, dict(generation.inputs), [PopConfig(skip=0), *self.configs], chunk=generation.chunk,
                stopping=generation.stopping, buffers=self._buffers, **generation.kwargs)
            self.together += outs is not None
            if outs is None:
                outs = [compute()]
                for config in self.configs:
                    with apply_pop(model, config):
                        outs.append(compute())
        for config, each in zip(self.configs, outs[1:]):
            self._waiting[(_name(config), key)] = each
        self.led += 1
        return outs[0]
