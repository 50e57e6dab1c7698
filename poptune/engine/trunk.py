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

**Peers** (``SharedTrunk(configs, peers=True)``, a batch of a study's trials raced together): the full model's
outcomes are known already and its layer inputs recorded (:class:`~poptune.engine.prefix.PrefixStates`, attached
by the caller), so no full-model pass leads; the first configuration to score a batch scores it for every
configuration still racing (:meth:`SharedTrunk.racing`), their prefills replayed from the recorded states and
their decodes stacked, and the others are served.

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
        peers: The configurations lead one another too: the first of those still racing (:meth:`racing`) to
            score a batch scores it for all of them, replaying the full model's recorded layer inputs where the
            caller attached them (:mod:`poptune.engine.prefix`).

    Attributes:
        led: Batches the full model (or a peer) led, computed for every configuration (still racing).
        served: Batches a configuration was served from another's lead.
        alone: Calls computed alone (a batch no lead covered, or a model outside ``configs``).
        together: Led batches whose generations were decoded as one batch (:mod:`poptune.engine.joint`).
    """

    def __init__(self, configs: Sequence[PopConfig], *, peers: bool = False) -> None:
        from poptune.engine.joint import StackBuffers

        names = [_name(c) for c in configs]
        if any(not isinstance(c, PopConfig) for c in configs) or "full" in names:
            raise ConfigError("a shared trunk's configurations must be PopConfigs with skip >= 1")
        if len(set(names)) != len(names):
            raise ConfigError(f"a shared trunk's configurations must be distinct, got {[str(c) for c in configs]}")
        self.configs = tuple(configs)
        self._names = frozenset(names)
        self.peers = peers
        self._racing = self.configs  # the peers a peer's lead scores a batch for
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

    def racing(self, configs: Sequence[PopConfig]) -> None:
        """From now on a peer's lead scores its batches for ``configs`` only (those of :attr:`configs` whose races
        go on); outputs still waiting for the others are dropped."""
        names = {_name(c) for c in configs}
        if not names <= self._names:
            raise ConfigError(f"racing configurations must be the trunk's, got {[str(c) for c in configs]}")
        self._racing = tuple(c for c in self.configs if _name(c) in names)
        for key in [k for k in self._waiting if k[0] not in names]:
            del self._waiting[key]

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
        itself. The full model's call leads (a peer's too, :attr:`peers`); a configuration's call is served what
        the lead left for it. A ``generation`` says what ``compute`` generates: the lead then decodes all
        configurations as one batch.
        """
        from poptune.engine.joint import generate_together
        from poptune.engine.prefix import PrefixStates, attached_states

        me = _name(get_pop_config(model))
        waiting = self._waiting.pop((me, key), None)
        if waiting is not None:
            self.served += 1
            return waiting
        if me == "full" and self._racing:  # the full model leads, its layer inputs recorded
            lead, follow = PopConfig(skip=0), list(self._racing)
            # for this batch only (bounded by the batch), or where peers race in the caller's states: later
            # trials replay them
            recording: Any = contextlib.nullcontext() if self.peers and attached_states(model) is not None \
                else PrefixStates(max_bytes=1 << 62).attached(model)
        elif self.peers and any(_name(c) == me for c in self._racing):  # a peer leads, the caller's states replayed
            lead = next(c for c in self._racing if _name(c) == me)
            follow = [c for c in self._racing if c is not lead]
            recording = contextlib.nullcontext()
        else:
            self.alone += 1
            return compute()
        with recording:
            outs: list[Any] | None = None if generation is None else generate_together(
                model, dict(generation.inputs), [lead, *follow], chunk=generation.chunk,
                stopping=generation.stopping, buffers=self._buffers, **generation.kwargs)
            self.together += outs is not None
            if outs is None:
                outs = [compute()]
                for config in follow:
                    with apply_pop(model, config):
                        outs.append(compute())
        for config, each in zip(follow, outs[1:]):
            self._waiting[(_name(config), key)] = each
        self.led += 1
        return outs[0]
