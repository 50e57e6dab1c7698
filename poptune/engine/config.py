"""A POP configuration (:class:`PopConfig`) and every outside form of one, read and written here only.

The forms:

- the **label** (:attr:`PopConfig.label`), ``SKIP/BOUNDARY/OFFSET`` with ``/KV`` for a K/V source other than the
  paper's (``6/last/0``, ``6/last/0/calibrated``), ``full model`` at skip 0; what reports, boards and progress
  show, and what the command line takes (:meth:`PopConfig.parse`, ``--pop``, ``--enqueue``);
- the **title** (:attr:`PopConfig.title`), the long label of a leaderboard's row (``skip 6, last, offset 0``);
- the **tag** (:attr:`PopConfig.tag`), a file-name-safe name (``pop-skip6-last-off0``);
- the **record** (:meth:`PopConfig.to_dict` / :meth:`PopConfig.from_dict`), what studies, measurements and exports
  store;
- **fields given as text** (:meth:`PopConfig.from_fields`): lm-eval's ``--model_args``, a grid's CSV row;
- ``str(config)``: ``skip=6 boundary=last offset=0``, for messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from poptune.boundary import registry as boundary_registry
from poptune.boundary.rule import BoundaryRule
from poptune.errors import ConfigError
from poptune.kv import registry

__all__ = ["FIELDS", "PopConfig"]

#: The fields of a configuration's record.
FIELDS: tuple[str, ...] = ("skip", "boundary", "offset", "layers", "kv")


@dataclass(frozen=True)
class PopConfig:
    """One POP configuration.

    Args:
        skip: Number of layers skipped in prefill (0 = the full model).
        boundary: Which final prompt tokens run through the full model, the name of a rule of
            :mod:`poptune.boundary.registry` (``none``: the whole prompt is pruned; the paper's ``last``: tokens
            1..N-1 pruned, token N through the full model; ``window-W``: the last W prompt tokens).
        offset: Number of final layers kept even in prefill. The skipped block is
            ``[L - offset - skip, L - offset)``; the paper's case is 0.
        layers: An explicit set of skipped layers instead of a final block (for baselines that choose layers by
            a metric, e.g. ShortGPT's prefill-only variant); ``skip`` must equal its size and ``offset`` be 0.
        kv: Where the pruned tokens' K/V come from, the name of a source of :mod:`poptune.kv.registry`
            (``registry.NAMES``; each source's module says what it needs): by default the skipped layers' own
            projections (the paper).
    """

    skip: int
    boundary: str = boundary_registry.DEFAULT
    offset: int = 0
    layers: tuple[int, ...] | None = None
    kv: str = registry.DEFAULT

    def __post_init__(self) -> None:
        for name in ("skip", "offset"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"`{name}` must be an integer, got {value!r}")
            if value < 0:
                raise ConfigError(f"`{name}` must be >= 0, got {value}")
        boundary_registry.rule(self.boundary)
        if self.layers is not None:
            layers = self.layers
            if not isinstance(layers, tuple) or any(isinstance(i, bool) or not isinstance(i, int) for i in layers):
                raise ConfigError(f"`layers` must be a tuple of layer indices, got {layers!r}")
            if list(layers) != sorted(set(layers)) or (layers and layers[0] < 0):
                raise ConfigError(f"`layers` must be distinct indices >= 0 in increasing order, got {list(layers)}")
            if self.skip != len(layers) or self.offset:
                raise ConfigError(f"with `layers`, `skip` must be {len(layers)} (their number) and `offset` 0")
        registry.source(self.kv).check(self)

    @property
    def rule(self) -> BoundaryRule:
        """The boundary rule (:mod:`poptune.boundary.registry`): which tokens go deep."""
        return boundary_registry.rule(self.boundary)

    @property
    def boundary_width(self) -> int:
        """Number of final prompt tokens that run through the full model (the rule's width; 0: none)."""
        return self.rule.width

    def check(self, num_layers: int) -> None:
        """Raise :class:`ConfigError` unless this configuration fits a model with ``num_layers`` layers."""
        if self.layers and self.layers[-1] >= num_layers:
            raise ConfigError(f"`layers` must be in [0, {num_layers - 1}] for this model, got {list(self.layers)}")
        if self.skip > num_layers - 1:
            raise ConfigError(f"`skip` must be in [0, {num_layers - 1}] for this model, got {self.skip}")
        if self.offset > num_layers - 1 - self.skip:
            raise ConfigError(
                f"`offset` must be in [0, {num_layers - 1 - self.skip}] for this model with skip={self.skip}, "
                f"got {self.offset}"
            )

    def skipped_layers(self, num_layers: int) -> tuple[int, ...] | range:
        """Indices of the layers skipped in prefill: ``layers``, else ``[L - offset - skip, L - offset)``."""
        self.check(num_layers)
        if self.layers is not None:
            return self.layers
        stop = num_layers - self.offset
        return range(stop - self.skip, stop)

    # -- the record

    def to_dict(self) -> dict[str, Any]:
        """The record: ``skip``, ``boundary``, ``offset``; ``layers`` where given, ``kv`` where not the paper's."""
        data = asdict(self)
        if self.layers is None:
            del data["layers"]  # a final block: the three fields every stored configuration has
        else:
            data["layers"] = list(self.layers)
        if registry.is_default(self.kv):
            del data["kv"]  # the paper's K/V: configurations stored before other K/V sources read the same
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PopConfig":
        """The configuration of a record (:meth:`to_dict`'s)."""
        unknown = set(data) - set(FIELDS)
        if unknown:
            raise ConfigError(f"unknown PopConfig field(s): {', '.join(sorted(unknown))}")
        if "skip" not in data:
            raise ConfigError("a PopConfig needs `skip`")
        values = dict(data)
        if values.get("layers") is not None:
            values["layers"] = tuple(values["layers"])
        return cls(**values)

    # -- fields given as text

    @classmethod
    def from_fields(cls, skip: Any = 0, boundary: Any = boundary_registry.DEFAULT, offset: Any = 0, layers: Any = None,
                    kv: Any = None, *, who: str = "a configuration") -> "PopConfig":
        """The configuration of fields given as text (or values): integers as digits, ``layers`` as ``3-5-9``
        (or ``3,5,9``; ``skip`` then defaults to their number), a ``boundary`` of None read as ``none`` (lm-eval
        reads ``boundary=none`` so), ``kv`` of None or empty the paper's. ``who`` names the giver in the error.

        Raises:
            ConfigError: ``<who>: `skip`, `offset` and `layers` must be integers, got ...``, or the
                configuration's own refusal.
        """
        try:
            if isinstance(layers, str):
                layers = tuple(int(i) for i in layers.replace(",", "-").split("-") if i.strip())
            if layers is not None:
                layers = tuple(layers)
                skip = skip or len(layers)
            skip, offset = int(skip), int(offset)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{who}: `skip`, `offset` and `layers` must be integers, got skip={skip!r}, "
                              f"offset={offset!r}, layers={layers!r}") from e
        boundary = boundary_registry.PRUNE_ALL if boundary is None else str(boundary).strip()
        kv = str(kv).strip() if kv is not None and str(kv).strip() else registry.DEFAULT
        return cls(skip=skip, boundary=boundary, offset=offset, layers=layers, kv=kv)

    # -- the label

    @classmethod
    def parse(cls, text: str, option: str) -> "PopConfig":
        """The configuration of a label ``SKIP/BOUNDARY/OFFSET`` or ``SKIP/BOUNDARY/OFFSET/KV`` given to ``option``;
        any other field count or K/V source is refused (a fourth field is never ignored)."""
        fields = text.split("/")
        try:
            if len(fields) not in (3, 4):
                raise ValueError(text)
            skip, boundary, offset = int(fields[0]), fields[1], int(fields[2])
        except ValueError as e:
            raise ConfigError(f"`{option}` takes SKIP/BOUNDARY/OFFSET items (or SKIP/BOUNDARY/OFFSET/KV), got "
                              f"{text!r}") from e
        kv = fields[3] if len(fields) == 4 else registry.DEFAULT
        registry.source(kv, what=f"`{option}` item {text!r}: its K/V source")
        return cls(skip=skip, boundary=boundary, offset=offset, kv=kv)

    @property
    def label(self) -> str:
        """``SKIP/BOUNDARY/OFFSET`` (``/<kv>`` for a K/V source other than the paper's; `` layers I,J`` for an
        explicit set), or ``full model`` at skip 0; :meth:`parse` reads it back (a set of layers aside)."""
        if self.skip == 0:
            return "full model"
        text = f"{self.skip}/{self.boundary}/{self.offset}" + ("" if registry.is_default(self.kv) else f"/{self.kv}")
        return text if self.layers is None else f"{text} layers {','.join(map(str, self.layers))}"

    @property
    def title(self) -> str:
        """A leaderboard row's label: ``skip 6, last, offset 0`` (``, <K/V source's label>`` for another source)."""
        text = f"skip {self.skip}, {self.boundary}, offset {self.offset}"
        kv = registry.source(self.kv).label
        return text + (f", {kv}" if kv else "")

    @property
    def tag(self) -> str:
        """A file-name-safe name, e.g. ``pop-skip6-last-off0`` (the K/V source's tag, ``-layers3_5`` appended)."""
        source = registry.source(self.kv)
        tag = f"pop-skip{self.skip}-{self.boundary}-off{self.offset}" + (f"-{source.tag}" if source.tag else "")
        return tag if self.layers is None else f"{tag}-layers{'_'.join(map(str, self.layers))}"

    def __str__(self) -> str:
        text = f"skip={self.skip} boundary={self.boundary} offset={self.offset}"
        if not registry.is_default(self.kv):
            text += f" kv={self.kv}"
        return text if self.layers is None else f"{text} layers={','.join(map(str, self.layers))}"
