"""A sampler that knows the order of POP's search space (:class:`StructuredSampler`), and what the order implies.

**The order.** Configuration ``a`` is *no deeper* than ``b`` (:func:`no_deeper`) when both use the same K/V
source, the layers ``a`` skips are a subset of those ``b`` skips, and ``a`` keeps at least as many final prompt
tokens at full depth (the boundary rule's width, as its contract orders it,
:meth:`poptune.boundary.rule.BoundaryRule.order`; ``none`` 0 < ``last`` 1 < ``window-4`` < ``window-16`` <
``window-64``, never their place in the registry).
Within a family (boundary, offset, K/V source) that is ``skip`` ascending; across boundaries at one block, the
wider window; across offsets it relates nested blocks (skip 6 at offset 1 skips a subset of skip 7 at offset
0). Up to noise the accuracy drop grows along the order, and the FLOPs ideal speedup, known before anything is
measured, grows with the skipped layers and with narrower boundaries.

**The search**, one proposal per trial, each a configuration no trial of the study holds:

0. *Anchor.* The fastest configuration (greatest ideal): nothing can be faster, so it is always on the front.
1. *Budget search.* Within budget is modelled as ``skip + offset <= T_b`` (the block's depth from the top:
   at one depth, offset 0 skips the most layers) with one threshold ``T_b`` per boundary, nested
   (``T_none <= T_last <= ... <= T_window-64``), under a prior uniform on ``T_window-64`` and uniform over the
   nested thresholds below it. Each measured trial updates the posterior with the probability that its drop is
   within the budget given its interval (``Phi((budget - drop) / sigma)``, sigma the interval's half-width /
   1.96, kept within [0.02, 0.98]): probabilistic bisection with noisy answers (Horstein 1963; Waeber, Frazier
   & Henderson, "Bisection search with noisy responses", SIAM J. Control Optim. 2013), on a chain per boundary
   tied by the nesting. The proposal is the offset-0 configuration of greatest knowledge gradient (Frazier,
   Powell & Dayanik 2008: how much one more answer there raises the best bet ``P(within) * (ideal - 1)``) plus
   expected improvement (Jones, Schonlau & Welch 1998: ``P(within) * (ideal - best)`` over the fastest
   measured configuration the posterior puts within), so families are ranked by their known ideal. A
   boundary's own ``P(within)`` counts the other boundaries' trials at half weight (the nesting holds up to
   noise).
2. *Front.* Once no configuration's score reaches :attr:`StructuredSampler.min_gain` of the best, the
   configuration whose optimistic point adds the most hypervolume to the measured front
   (hypervolume improvement; Emmerich, Beume & Naujoks, EMO 2005): its latency predicted from its ideal
   (``latency = a * ideal ** -beta`` fitted to the measured trials), its accuracy the least of the measured
   configurations whose block starts no deeper and keeps as many tokens (the budget model's order; the best
   measured where none is).
3. *Spot checks.* When no unmeasured configuration can enter the front (no improvement of at least 1% of the
   hypervolume), the fastest of the rest: a check of the verdicts the order implies, where a break of
   the order would gain the most; so a grid that breaks the order is still covered, its gains first.

A trial's verdict is read from what the study stored: the ``drop`` user attribute (``mean``/``lo``/``hi``
points, and ``drop_points``) against the budget (``max_drop``, else inferred from the trial's constraint,
which a POP study sets to ``drop lo - budget``); without a drop, the trial's constraints (feasible: all <= 0);
without either, none (then only the front is searched). Objectives: the study's TTFT (minimised) and accuracy
(maximised), read by name (:mod:`poptune.objectives.registry`); a study's other objectives (TPOT, K/V bytes) are
not searched for, only measured.

:func:`implied_verdicts` lists what the order implies for configurations no trial measured (never reported as
measured); :func:`order_violations` counts where a measured grid breaks the order beyond its intervals.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna

from poptune.boundary import registry as boundary_registry
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry
from poptune.objectives.accuracy import ACCURACY
from poptune.objectives.registry import DEFAULT, named
from poptune.objectives.ttft import TTFT
from poptune.problem.space import OWN, all_configs
from poptune.store.measurement import Measurement
from poptune.store.trials import is_pop
from poptune.tune.params import config_of_trial, params_of

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ImpliedVerdict", "Observation", "OrderViolations", "SpotCheck", "StructuredSampler",
           "implied_verdicts", "no_deeper", "observations", "order_violations", "proxy_ideal", "spot_checks"]

#: The answer probabilities kept away from 0 and 1: no single trial rules a threshold out.
_CLIP = 0.02

#: The weight of the other boundaries' trials in a boundary's own chance of being within the budget.
_OTHERS = 0.5

#: The least hypervolume improvement, relative to the measured front's, worth a trial.
_FRONT_GAIN = 0.01

#: How sure a typical answer is, for the look-ahead: P(seen within | within).
_ANSWER = 0.8


def no_deeper(a: PopConfig, b: PopConfig, num_layers: int) -> bool:
    """Whether ``a`` is no deeper than ``b`` in the order (see the module): its drop is expected no larger."""
    if a.skip == 0:
        return True
    if b.skip == 0 or a.kv != b.kv or a.boundary_width < b.boundary_width:
        return False
    a_start, a_end = num_layers - a.offset - a.skip, num_layers - a.offset
    b_start, b_end = num_layers - b.offset - b.skip, num_layers - b.offset
    return b_start <= a_start and a_end <= b_end


def _shallower_block(a: PopConfig, b: PopConfig) -> bool:
    """The budget model's order (see the module): ``a``'s block starts no deeper (``skip + offset``) and keeps
    at least as many tokens; it contains :func:`no_deeper`."""
    if a.skip == 0:
        return True
    return (b.skip > 0 and a.kv == b.kv and a.skip + a.offset <= b.skip + b.offset
            and a.boundary_width >= b.boundary_width)


def proxy_ideal(config: PopConfig, num_layers: int, length: int = 1024, kv_share: float = 0.1) -> float:
    """A model-free stand-in for the FLOPs ideal speedup (:func:`poptune.measure.flops.ideal_speedup`) where
    the model is not at hand: layers of equal cost, a skipped layer's pruned tokens paying ``kv_share`` of it
    (their K/V projections, those the K/V source keeps), ``length`` prompt tokens. It orders configurations as
    the FLOPs ideal does within a family and across boundaries."""
    if config.skip == 0:
        return 1.0
    tokens = config.rule.pruned(length)
    share = kv_share * kv_registry.source(config.kv).kept(tokens) / tokens if tokens else kv_share
    return num_layers / (num_layers - config.skip * config.rule.pruned_share(length) * (1 - share))


@dataclass(frozen=True)
class Observation:
    """What one completed trial says to the sampler.

    Attributes:
        config, number: The configuration and the trial.
        latency, accuracy: Its objective values (minimised, maximised).
        within: The probability that its drop is within the budget (None: the trial says nothing of it).
    """

    config: PopConfig
    number: int
    latency: float
    accuracy: float
    within: float | None


def _budget(trials: Sequence["optuna.trial.FrozenTrial"]) -> float | None:
    """The budget a POP study's constraint encodes (``drop lo - budget``), from its first trial with both."""
    for t in trials:
        drop, constraints = t.user_attrs.get("drop"), list(t.constraints.values())
        if isinstance(drop, Mapping) and drop.get("lo") is not None and len(constraints) == 1:
            return float(drop["lo"]) - float(constraints[0])
    return None


def _within(trial: "optuna.trial.FrozenTrial", budget: float | None) -> float | None:
    drop = trial.user_attrs.get("drop")
    if budget is not None and isinstance(drop, Mapping) and drop.get("lo") is not None:
        attrs = trial.user_attrs
        mean = float(attrs["drop_points"] if "drop_points" in attrs else drop.get("mean", drop["lo"]))
        lo, hi = float(drop["lo"]), float(drop.get("hi", drop["lo"]))
        if lo > budget:  # rejected: the study's own constraint
            return _CLIP
        sigma = max((hi - lo) / (2 * 1.959964), 1e-3)
        return min(max(0.5 * math.erfc((mean - budget) / (sigma * math.sqrt(2))), _CLIP), 1 - _CLIP)
    constraints = trial.constraints.values()
    if constraints:
        return 1 - _CLIP if all(c <= 0 for c in constraints) else _CLIP
    return None


#: The objectives the order of POP's space is read on: TTFT and accuracy (a study's others are only measured).
READS = (TTFT.name, ACCURACY.name)


def reads(objectives: Sequence[str]) -> bool:
    """Whether a study of ``objectives`` has those the order is read on (:data:`READS`)."""
    return set(READS) <= set(objectives)


def observations(trials: Sequence["optuna.trial.FrozenTrial"], num_layers: int, max_drop: float | None = None,
                 objectives: Sequence[str] = DEFAULT) -> dict[PopConfig, Observation]:
    """Each configuration's first completed trial, read as an :class:`Observation` (its TTFT and accuracy
    objectives by name among the study's ``objectives``)."""
    if not reads(objectives):
        raise ConfigError(f"the structured sampler reads the {' and '.join(READS)} objectives, the study has "
                          f"{', '.join(objectives)}")
    budget = max_drop if max_drop is not None else _budget(trials)
    seen: dict[PopConfig, Observation] = {}
    for t in sorted(trials, key=lambda t: t.number):
        values = named(objectives, t.values) if t.state == optuna.trial.TrialState.COMPLETE else {}
        if not values or not is_pop(t):
            continue  # a baseline's trial is not a point of the space
        config = config_of_trial(t, num_layers)
        if config is not None and config not in seen:
            latency, accuracy = (values[name] for name in READS)
            seen[config] = Observation(config, t.number, latency, accuracy, _within(t, budget))
    return seen


@dataclass(frozen=True)
class ImpliedVerdict:
    """A budget verdict the order implies for a configuration no trial measured.

    Attributes:
        config: The configuration.
        within: True: implied within the budget (no deeper than one measured within); False: implied beyond.
        basis: The trials it follows from.
        measured: Always False: an implied verdict is never a measurement.
    """

    config: PopConfig
    within: bool
    basis: tuple[int, ...]
    measured: bool = False


def implied_verdicts(seen: Mapping[PopConfig, Observation], num_layers: int, kv: tuple[str, ...] = OWN
                     ) -> list[ImpliedVerdict]:
    """The verdicts the order implies for the configurations ``seen`` lacks: within where the configuration
    is no deeper than a trial judged within (probability > 1/2) and no trial judged beyond is no deeper than
    it; beyond the other way round; nothing where the two conflict (the order broken by noise) or neither."""
    judged = _judged(seen)
    verdicts = (_implied(config, seen, judged, num_layers) for config in all_configs(num_layers, kv))
    return [v for v in verdicts if v is not None]


def _judged(seen: Mapping[PopConfig, Observation]) -> list[tuple[Observation, float]]:
    """The observations of POP configurations that say something of the budget, with what they say."""
    return [(o, o.within) for o in seen.values() if o.within is not None and o.config.skip > 0]


def _implied(config: PopConfig, seen: Mapping[PopConfig, Observation], judged: Sequence[tuple[Observation, float]],
             num_layers: int) -> ImpliedVerdict | None:
    """The verdict the order implies for ``config`` from the ``judged`` observations (:func:`implied_verdicts`),
    or None: measured, the full model, nothing implied, or a conflict."""
    if config in seen or config.skip == 0:
        return None
    up = tuple(o.number for o, within in judged if within > 0.5 and no_deeper(config, o.config, num_layers))
    down = tuple(o.number for o, within in judged if within < 0.5 and no_deeper(o.config, config, num_layers))
    if up and not down:
        return ImpliedVerdict(config, True, up)
    if down and not up:
        return ImpliedVerdict(config, False, down)
    return None


@dataclass(frozen=True)
class SpotCheck:
    """A trial that measured a configuration whose verdict the trials before it implied by the order.

    Attributes:
        trial, config: The trial and its configuration.
        implied_within: The implied verdict (True: within the budget).
        held: Whether the trial's own verdict (its drop within the budget with probability > 1/2) agrees.
    """

    trial: int
    config: PopConfig
    implied_within: bool
    held: bool


def spot_checks(trials: Sequence["optuna.trial.FrozenTrial"], num_layers: int, max_drop: float | None = None,
                kv: tuple[str, ...] = OWN, objectives: Sequence[str] = DEFAULT) -> list[SpotCheck]:
    """The implied verdicts a study's later trials measured: for each judged trial, what the trials before it
    implied of its configuration (:func:`implied_verdicts`), if anything, against what it measured."""
    done = sorted(trials, key=lambda t: t.number)
    space = set(all_configs(num_layers, kv))  # the configurations implied_verdicts speaks of
    checks = []
    for obs in observations(done, num_layers, max_drop, objectives).values():
        if obs.within is None or obs.config not in space:
            continue
        before = observations([t for t in done if t.number < obs.number], num_layers, max_drop, objectives)
        implied = _implied(obs.config, before, _judged(before), num_layers)  # implied_verdicts' of this one
        if implied is not None:
            checks.append(SpotCheck(obs.number, obs.config, implied.within, implied.within == (obs.within > 0.5)))
    return checks


@dataclass(frozen=True)
class OrderViolations:
    """Pairs ``(a, b)`` of a measured grid with ``a`` no deeper than ``b`` that break the order.

    Attributes:
        pairs: Ordered pairs compared (``a != b``, both measured with a drop interval).
        decided: ``a`` decided beyond the budget (drop lo > budget) while ``b`` is decided within (drop hi <=
            budget): the order broken beyond both intervals, in verdicts.
        separated: ``a``'s drop interval lies wholly above ``b``'s: broken beyond the intervals, in drops.
        point: ``a``'s drop point above the budget while ``b``'s lies within it (what a search sees of the
            points alone, noise included).
        decided_within, decided_beyond: Configurations decided within (drop hi <= budget) and beyond (drop lo >
            budget): how much the count of ``decided`` could see.
    """

    pairs: int
    decided: int
    separated: int
    point: int
    decided_within: int = 0
    decided_beyond: int = 0


def order_violations(table: Mapping[PopConfig, Measurement], num_layers: int, max_drop: float, *,
                     family_only: bool = False) -> OrderViolations:
    """Count the breaks of the order in ``table`` (a measured grid) at budget ``max_drop``; with
    ``family_only``, only pairs of one family (boundary, offset, K/V source: ``skip`` ascending)."""
    rows = [(c, m) for c, m in table.items() if c.skip > 0 and m.drop is not None]
    pairs = decided = separated = point = 0
    for (a, ma), (b, mb) in itertools.permutations(rows, 2):
        if family_only and (a.boundary, a.offset, a.kv) != (b.boundary, b.offset, b.kv):
            continue
        if not no_deeper(a, b, num_layers):
            continue
        pairs += 1
        decided += ma.drop_lower > max_drop and mb.drop_upper <= max_drop
        separated += ma.drop_lower > mb.drop_upper
        point += ma.drop_points > max_drop >= mb.drop_points
    return OrderViolations(pairs, decided, separated, point, sum(m.drop_upper <= max_drop for _, m in rows),
                           sum(m.drop_lower > max_drop for _, m in rows))


def _nested_thresholds(num_layers: int, boundaries: int) -> "np.ndarray":
    """Every nested tuple of thresholds ``T_none <= ... <= T_window-64`` in ``[0, L-1]`` of ``boundaries`` rules in
    their order: (n, boundaries)."""
    import numpy as np

    tuples = itertools.combinations_with_replacement(range(num_layers), boundaries)
    return np.array(list(tuples), dtype=np.int16)


def _hypervolume(points: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """2-D hypervolume of (latency to minimise, accuracy to maximise) against ``reference``."""
    volume, best = 0.0, reference[1]
    for latency, accuracy in sorted(p for p in points if p[0] < reference[0] and p[1] > reference[1]):
        if accuracy > best:
            volume += (reference[0] - latency) * (accuracy - best)
            best = accuracy
    return volume


class StructuredSampler(optuna.samplers.BaseSampler):
    """An Optuna sampler over POP's space that searches it by its order (see the module for the method).

    Usable by any Optuna study whose objective asks :func:`~poptune.tune.params.suggest_config` and returns
    its ``objectives`` (:mod:`poptune.objectives.registry`; TTFT and accuracy among them, the others are not
    searched for); seeded, so a study is reproducible. Example::

        sampler = StructuredSampler(18, max_drop=2.0, seed=0)
        study = optuna.create_study(directions=registry.directions(registry.DEFAULT), sampler=sampler)

    Args:
        num_layers: The model's layers (the space of :func:`~poptune.problem.space.all_configs`).
        kv: The space's K/V sources.
        max_drop: The accuracy budget in points (None: inferred from the trials' constraints).
        ideal: The ideal speedup of every configuration (a mapping or a function; default
            :func:`proxy_ideal`).
        seed: Seeds the random fallback.
        min_gain: The least expected improvement, relative to the best speedup within the budget, that keeps
            the budget search going.
        objectives: The study's objectives by name, in the order of its trials' values.
    """

    def __init__(self, num_layers: int, *, kv: tuple[str, ...] = OWN, max_drop: float | None = None,
                 ideal: Mapping[PopConfig, float] | Callable[[PopConfig], float] | None = None,
                 seed: int | None = None, min_gain: float = 0.002, objectives: Sequence[str] = DEFAULT) -> None:
        import numpy as np

        self.num_layers, self.kv, self.max_drop, self.min_gain = num_layers, kv, max_drop, min_gain
        self.objectives = tuple(objectives)
        self._configs = all_configs(num_layers, kv)
        get = ideal.__getitem__ if isinstance(ideal, Mapping) else ideal
        self._ideal = {c: float(get(c)) if get is not None else proxy_ideal(c, num_layers) for c in self._configs}
        self._rng = random.Random(seed)
        # The boundary rules in the contract's order (fewest tokens at full depth first): a threshold each, nested.
        self._order = boundary_registry.ordered()
        n = len(self._order)
        self._tuples = _nested_thresholds(num_layers, n)
        # Uniform on the widest boundary's threshold, then uniform over the nested ones below it.
        widest = self._tuples[:, -1].astype(float)
        self._log_prior = -np.array([math.log(math.comb(int(t) + n - 1, n - 1)) for t in widest])
        self._picked: dict[int, dict[str, Any]] = {}

    def infer_relative_search_space(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial"
                                    ) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial",
                        search_space: dict[str, Any]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: "optuna.Study", trial: "optuna.trial.FrozenTrial", param_name: str,
                           param_distribution: Any) -> Any:
        if trial.number not in self._picked:
            trials = study.get_trials(deepcopy=False)
            self._picked[trial.number] = params_of(self.propose(trials, exclude=trial.number), self.kv)
        params = self._picked[trial.number]
        if param_name not in params:  # an objective asking more than the space: Optuna's own draw
            return optuna.samplers.RandomSampler(seed=self._rng.randrange(2**31)).sample_independent(
                study, trial, param_name, param_distribution)
        return params[param_name]

    def propose(self, trials: Sequence["optuna.trial.FrozenTrial"], *, exclude: int | None = None) -> PopConfig:
        """The next configuration given the study's ``trials``: budget search, then the front, then random."""
        taken = {config_of_trial(t, self.num_layers) for t in trials if t.number != exclude and is_pop(t)}
        free = [c for c in self._configs if c not in taken]
        if not free:
            return self._rng.choice(self._configs)
        seen = observations(trials, self.num_layers, self.max_drop, self.objectives)
        fastest = max(self._configs, key=self._ideal.__getitem__)
        if fastest in free:  # always on the front: nothing can be faster
            return fastest
        for step in (self._budget_step, self._front_step):
            config = step(seen, free)
            if config is not None:
                return config
        return self._spot_check(free)

    def _spot_check(self, free: list[PopConfig]) -> PopConfig:
        """Where the order leaves nothing to gain: a check of what it implies, where a break would gain most
        (the fastest free configuration; among equals, a seeded random one)."""
        fastest = max(self._ideal[c] for c in free)
        return self._rng.choice([c for c in free if self._ideal[c] == fastest])

    def _posterior(self, seen: Mapping[PopConfig, Observation], source: str, own: int | None = None
                   ) -> "np.ndarray":
        """Posterior weights of the nested threshold tuples of K/V source ``source`` given the trials; with
        ``own`` (a boundary's index), the other boundaries' trials count with the weight :data:`_OTHERS` (the
        nesting holds up to noise: a boundary's own trials say most of it)."""
        import numpy as np

        log_post = self._log_prior.copy()
        for o in seen.values():
            if o.within is None or o.config.skip == 0 or o.config.kv != source:
                continue
            b = self._order.index(o.config.boundary)
            holds = self._tuples[:, b] >= o.config.skip + o.config.offset
            weight = 1.0 if own is None or own == b else _OTHERS
            log_post += weight * np.where(holds, math.log(o.within), math.log(1 - o.within))
        weights = np.exp(log_post - log_post.max())
        return weights / weights.sum()

    def _marginals(self, weights: "np.ndarray") -> "np.ndarray":
        """``P(T_b >= d)``: an array (boundaries, depths 0..L-1)."""
        import numpy as np

        mass = np.stack([np.bincount(self._tuples[:, b], weights, minlength=self.num_layers)
                         for b in range(len(self._order))])  # (boundaries, thresholds)
        return mass[:, ::-1].cumsum(axis=1)[:, ::-1]

    def within_probability(self, seen: Mapping[PopConfig, Observation]) -> dict[str, "np.ndarray"]:
        """Per K/V source, ``P(within)`` of every boundary (rows, in the contract's order, ``ordered()`` of
        :mod:`poptune.boundary.registry`) and block
        depth ``skip + offset`` (columns) under the posterior."""
        return {source: self._marginals(self._posterior(seen, source)) for source in self.kv}

    def _gains(self, source: str) -> "np.ndarray":
        """The ideal speedup's gain over the full model of each (boundary, skip) at offset 0: (boundaries, L)."""
        import numpy as np

        gains = np.zeros((len(self._order), self.num_layers))
        for b, boundary in enumerate(self._order):
            for skip in range(1, self.num_layers):
                config = PopConfig(skip=skip, boundary=boundary, kv=kv_registry.distinct_at(skip, (source,))[0])
                gains[b, skip] = self._ideal.get(config, proxy_ideal(config, self.num_layers)) - 1
        return gains

    def _budget_step(self, seen: Mapping[PopConfig, Observation], free: list[PopConfig]) -> PopConfig | None:
        """The free offset-0 configuration of the greatest knowledge gradient plus expected improvement, if any
        reaches :attr:`min_gain` of the best bet's value."""
        import numpy as np

        if seen and all(o.within is None for o in seen.values()):
            return None  # the study says nothing of a budget: only the front
        best, scored = 0.0, []
        posts = {source: self._posterior(seen, source) for source in self.kv}
        marginals = {source: np.stack([self._marginals(self._posterior(seen, source, b))[b]
                                       for b in range(len(self._order))]) for source in self.kv}
        for c, o in seen.items():
            if c.skip and o.within is not None and marginals[c.kv][self._order.index(c.boundary),
                                                                   c.skip + c.offset] > 0.5:
                best = max(best, self._ideal[c] - 1)
        for source in self.kv:
            gains = self._gains(source)
            now = float((marginals[source] * gains).max())
            for c in free:
                if c.skip == 0 or c.offset or c.kv != kv_registry.distinct_at(c.skip, (source,))[0]:
                    continue
                b = self._order.index(c.boundary)
                p = float(marginals[source][b, c.skip])
                scored.append((self._lookahead(posts[source], b, c.skip, gains) - now
                               + p * max(gains[b, c.skip] - best, 0.0), self._ideal[c], c))
        if not scored:
            return None
        score, _, config = max(scored, key=lambda s: (s[0], s[1]))
        return config if score >= self.min_gain * max(best, 1e-9) else None

    def _lookahead(self, weights: "np.ndarray", b: int, depth: int, gains: "np.ndarray") -> float:
        """The best bet's expected value after one more answer on (boundary ``b``, ``depth``): the knowledge
        gradient (Frazier, Powell & Dayanik 2008) with a typical answer's strength (:data:`_ANSWER`)."""
        import numpy as np

        holds = self._tuples[:, b] >= depth
        value = 0.0
        for strength in (_ANSWER, 1 - _ANSWER):
            joint = weights * np.where(holds, strength, 1 - strength)
            mass = float(joint.sum())
            value += mass * float((self._marginals(joint / mass) * gains).max())
        return value

    def _front_step(self, seen: Mapping[PopConfig, Observation], free: list[PopConfig]) -> PopConfig | None:
        """The free configuration whose optimistic point adds the most hypervolume, if any adds some."""
        if len(seen) < 2:
            return None
        predict = self._latency_model(seen)
        points = [(o.latency, o.accuracy) for o in seen.values()]
        best_accuracy = max(p[1] for p in points)
        candidates = []
        for c in free:
            bound = min((o.accuracy for o in seen.values() if _shallower_block(o.config, c)), default=best_accuracy)
            candidates.append((predict(self._ideal[c]), bound, c))
        reference = (max(max(p[0] for p in points), max(p[0] for p in candidates)) * 1.01,
                     min(p[1] for p in points) - 0.01)
        base = _hypervolume(points, reference)
        gain, config = max(((_hypervolume(points + [(lat, acc)], reference) - base, c) for lat, acc, c in candidates),
                           key=lambda g: (g[0], self._ideal[g[1]]))
        return config if gain > _FRONT_GAIN * base else None

    def _latency_model(self, seen: Mapping[PopConfig, Observation]) -> Callable[[float], float]:
        """``latency = a * ideal ** -beta``, fitted by least squares in logs (beta in [0.5, 1])."""
        xs = [math.log(self._ideal.get(c, proxy_ideal(c, self.num_layers))) for c in seen]
        ys = [math.log(max(o.latency, 1e-12)) for o in seen.values()]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        beta = 1.0 if var < 1e-12 else -sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var
        beta = min(max(beta, 0.5), 1.0)
        a = math.exp(my + beta * mx)
        return lambda ideal: a * ideal ** -beta
