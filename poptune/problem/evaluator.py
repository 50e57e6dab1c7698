"""The one place that evaluates a configuration: latency beside the full model, then accuracy.

The model loads once, on first use. Both halves follow the problem's workload
(:mod:`poptune.evaluate.workload`): its items in a fixed order, and the lengths of their prompts.

- **Latency** is timed as interleaved POP/full pairs at a few lengths of the workload's prompts (quantile
  groups), and the objective is the expected time to first token over them, weighted by the share of prompts
  each length stands for. A speedup from timings taken minutes apart on a shared machine would measure the
  machine, not POP.
- **Accuracy** is raced (:mod:`poptune.evaluate.racing`): rounds of items until the paired drop's interval
  is decided. The full model scores each item once per study (its outcomes can be handed in from a resumed
  study) and every configuration is paired with it item by item. With state reuse (:mod:`poptune.engine.prefix`) a
  resumed study's full model runs its stored items once more per process, when a configuration first needs
  them: that records the states and answers POP replays, and checks that they still score as stored.
- **Sharing** (:meth:`ConfigEvaluator.sharing`, a certification): the full model's scoring of a batch also
  scores the shared configurations from its trunk (:mod:`poptune.engine.trunk`), one batch's states at a time.
- **Raced together** (:meth:`ConfigEvaluator.race_together`, a batch of a study's trials): several
  configurations raced round by round, each batch scored once for all those still racing from the full model's
  recorded states (a trunk of peers); each result waits for its configuration's :meth:`~ConfigEvaluator.evaluate`.
- **Remembered answers** (:meth:`ConfigEvaluator.remember_answers`): the full model's outcome of an item is read
  from the answers file when it is there (:mod:`poptune.store.answers`), and stored when it is scored.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from poptune import progress
from poptune.device import dtype_of
from poptune.engine import PopConfig, decoder_of
from poptune.problem import runtime as runtimes
from poptune.problem.problem import TuningProblem
from poptune.store.measurement import Measurement
from poptune.transform import Transform, applied

if TYPE_CHECKING:
    from pathlib import Path

    from poptune.baselines import Baseline
    from poptune.engine.prefix import PrefixStates
    from poptune.engine.trunk import SharedTrunk
    from poptune.evaluate.racing import RaceResult, RacingPolicy
    from poptune.evaluate.suite import TaskRun
    from poptune.evaluate.workload import Workload
    from poptune.kvfit.fit import KVFitSpec, KVFitter
    from poptune.store.answers import FullAnswers

__all__ = ["ConfigEvaluator", "STATE_BYTES"]

#: Prompts per task in a study's K/V calibration split (see :meth:`ConfigEvaluator.kv_fit_spec`).
KV_PROMPTS = 32

#: Memory the reused prefix states of a study may take (see :mod:`poptune.engine.prefix`).
STATE_BYTES = 4 << 30


class ConfigEvaluator:
    """Measures configurations of one :class:`TuningProblem` on this machine.

    Args:
        problem: What to measure.
        full_accuracy: Ignored unless no full run is given: an old study's per-task accuracy (no outcomes).
        full_run: The full model's run stored with a resumed study (:meth:`TaskRun.to_dict`).
        model: An already loaded ``(model, tokenizer)`` (for tests; default: load ``problem.model``).

    Its work is reported in phases (:mod:`poptune.progress`): the full model's accuracy, a configuration's
    latency (timing pairs) and accuracy (racing rounds, scored requests).
    """

    def __init__(
        self,
        problem: TuningProblem,
        *,
        full_accuracy: dict[str, float] | None = None,
        full_run: dict[str, Any] | None = None,
        model: tuple[Any, Any] | None = None,
    ) -> None:
        from poptune.evaluate.suite import TaskRun

        self.problem = problem
        self._loaded = model
        self._full: TaskRun | None = TaskRun.from_dict(full_run) if full_run else None
        self._legacy_full = dict(full_accuracy) if full_accuracy and not full_run else None
        self._workload: Workload | None = None
        self._image_length: int | None = None
        self.states: PrefixStates | None = None  # see enable_state_reuse
        self._recorded: dict[str, set[int]] = {}  # items whose full-model states this process has recorded
        self._kv_fitter: KVFitter | None = None  # one residual stream of calibration text for every block
        self._trunk: SharedTrunk | None = None  # see sharing
        self.answers: FullAnswers | None = None  # see remember_answers
        self._raced: dict[PopConfig, RaceResult] = {}  # see race_together
        self.scoring: dict[str, list[float]] = {}  # "full"/"pop" -> [seconds, items] scored (see seconds_per_item)
        self._runtime: runtimes.Runtime | None = None

    @property
    def runtime(self) -> runtimes.Runtime:
        """Where configurations are timed and scored (:mod:`poptune.problem.runtime`), made on first use."""
        if self._runtime is None:
            self._runtime = runtimes.make(self.problem)
        return self._runtime

    @property
    def model(self) -> Any:
        return self._load()[0]

    @property
    def tokenizer(self) -> Any:
        return self._load()[1]

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from poptune.models import load_model

            p = self.problem
            self._loaded = load_model(p.model, device=p.device, dtype=p.dtype_named().dtype, weights=p.weights)
        return self._loaded

    @property
    def num_layers(self) -> int:
        return len(decoder_of(self.model).layers)

    @property
    def workload(self) -> Workload:
        """The items scored, in order, and their prompt lengths (built once)."""
        if self._workload is None:
            from poptune.evaluate.workload import build_workload

            p = self.problem
            limit = getattr(decoder_of(self.model).config, "max_position_embeddings", None)
            cap = p.racing().cap + (p.certify_limit if p.certifies else 0)  # then the certification's fresh items
            self._workload = build_workload(self.tokenizer, p.tasks, data_dir=p.data_path(), cap=cap,
                                            synthetic_lengths=p.synthetic_lengths, max_positions=limit, seed=p.seed,
                                            prompts=p.prompts)
        return self._workload

    def latency_points(self) -> list[tuple[int, float]]:
        """``[(prompt length, weight)]`` timed per trial: the workload's, or the problem's lengths unweighted."""
        p = self.problem
        if not p.weighted:
            return [(n, 0.0) for n in p.lengths]
        return self.workload.latency_points(p.racing().cap, p.latency_points)

    @property
    def target_length(self) -> int:
        """Tokens of the prompt whose prefill latency is the objective (weighted: the longest timed)."""
        if self.problem.weighted:
            return max(n for n, _ in self.latency_points())
        if self.problem.image is None:
            return self.problem.target
        if self._image_length is None:
            from poptune.measure.timing_prompts import image_prompt_batch
            from poptune.models.vision import ImageSize, kept_rope_state

            with kept_rope_state(self.model):
                inputs = image_prompt_batch(self.model, self.tokenizer, ImageSize.parse(self.problem.image))
            self._image_length = int(inputs["input_ids"].shape[1])
        return self._image_length

    def _eval_spec(self) -> Any:
        from poptune.evaluate.suite import EvalSpec

        p = self.problem
        return EvalSpec(tasks=p.tasks, data_dir=p.data_path(), batch_size=p.eval_batch_size, fidelity=None,
                        synthetic_lengths=p.synthetic_lengths, seed=p.seed, prompts=p.prompts)

    def _score(self, config: PopConfig, items: dict[str, list[int]], *, reuse: bool = True) -> "TaskRun":
        spec = self._eval_spec().with_samples(items)
        if not reuse:  # a baseline's changed model must neither record nor replay nor lead
            return self.runtime.score(self.model, self.tokenizer, config, spec)
        started = time.perf_counter()
        with contextlib.ExitStack() as stack:
            if self.states is not None:  # the full model records its prefills, POP replays them
                stack.enter_context(self.states.attached(self.model))
            if self._trunk is not None:  # the full model's batches also score the shared configurations
                stack.enter_context(self._trunk.attached(self.model, keep=True))
            run = self.runtime.score(self.model, self.tokenizer, config, spec)
        if self._trunk is None:  # what an item costs alone: the full model's, and a configuration's beside it
            spent = self.scoring.setdefault("full" if config.skip == 0 else "pop", [0.0, 0])
            spent[0] += time.perf_counter() - started
            spent[1] += sum(map(len, items.values()))
        return run

    def seconds_per_item(self) -> float | None:
        """What scoring one more item costs the full model and one configuration beside it, as this process
        measured it (None before it scored both)."""
        if not all(self.scoring.get(k, (0, 0))[1] for k in ("full", "pop")):
            return None
        return sum(seconds / items for seconds, items in self.scoring.values())

    @contextlib.contextmanager
    def sharing(self, configs: "Sequence[PopConfig]", *, peers: bool = False) -> Iterator["SharedTrunk"]:
        """Within the block, the full model's scoring of an item also scores ``configs`` on it, from its trunk
        (:mod:`poptune.engine.trunk`): a configuration's later scoring of the same items computes nothing
        (``peers``: the configurations lead one another too, :meth:`race_together`). Each configuration is made
        ready for its K/V source first."""
        from poptune.engine.trunk import SharedTrunk

        configs = [c for c in dict.fromkeys(configs) if c.skip > 0]
        for config in configs:
            self.prepare_kv(config)
        previous, self._trunk = self._trunk, SharedTrunk(configs, peers=peers)
        try:
            yield self._trunk
        finally:
            self._trunk.clear()
            self._trunk = previous

    @property
    def _led(self) -> bool:
        """Whether the full model's scoring leads a trunk of fresh items (:meth:`sharing`), recording no state of
        the study's; peers raced together (:meth:`race_together`) replay and record the study's states."""
        return self._trunk is not None and not self._trunk.peers

    def enable_state_reuse(self, max_bytes: int = STATE_BYTES) -> float:
        """Reuse the full model's layer inputs in POP prefills (:mod:`poptune.engine.prefix`).

        First checks, on a prompt of the workload's longest timed length, that the replayed prefill of the
        paper's rule equals the plain one. Returns the check's max abs logit difference; raises
        :class:`~poptune.errors.MeasurementError` (reuse stays off) when it exceeds the tolerance.
        """
        from poptune.engine.prefix import PrefixStates, verify
        from poptune.measure.timing_prompts import prompt_batch

        length = max(n for n, _ in self.latency_points())
        ids = prompt_batch(self.tokenizer, length, 1, device=self.model.device)["input_ids"]
        config = PopConfig(skip=round(self.num_layers / 3))  # the paper's rule
        with progress.phase("state reuse check"):
            diff = verify(self.model, ids, config, PrefixStates(max_bytes=max_bytes))
        self.states = PrefixStates(max_bytes=max_bytes)
        return diff

    def full_run(self, counts: dict[str, int] | None = None) -> "TaskRun":
        """The full model's run covering the first ``counts[task]`` items (default: the first round)."""
        from poptune.evaluate.racing import extend_run

        if counts is None:
            counts = {t: min(self.problem.racing().start, self.workload.size(t)) for t in self.problem.tasks}
        have = self._full.counts if self._full else {}
        missing = {t: self.workload.order[t][have.get(t, 0) : n] for t, n in counts.items()}
        missing = {t: v for t, v in missing.items() if v}
        if missing:
            part = self._full_part(missing)
            for task in self.problem.tasks:  # a task already covered gets an empty part
                part.items.setdefault(task, [])
                part.outcomes.setdefault(task, [])
                part.scores.setdefault(task, dict(self._full.scores[task]) if self._full else {})
            self._full = extend_run(self._full, part)
        assert self._full is not None
        return self._full

    def remember_answers(self, path: "str | Path") -> "FullAnswers":
        """Read the full model's outcomes from, and store them in, the answers file ``path``
        (:mod:`poptune.store.answers`), keyed by this problem's weights, prompting and scoring."""
        import torch
        import transformers

        from poptune.models import weights_fingerprint
        from poptune.store.answers import FullAnswers

        p = self.problem
        settings = dict(model=p.model, weights=weights_fingerprint(p.model, p.weights), dtype=dtype_of(self.model),
                        device=str(self.model.device.type), batch_size=p.eval_batch_size, seed=p.seed,
                        synthetic_lengths=list(p.synthetic_lengths), data_dir=p.data_dir,
                        prompts=p.prompts_sha256 or p.prompts, torch=torch.__version__,
                        transformers=transformers.__version__)
        if p.runtime != "hf":  # another engine's answers are its own (the keys of poptune's engine's unchanged)
            settings["runtime"] = p.runtime
        self.answers = FullAnswers(path, settings)
        return self.answers

    def _full_part(self, missing: dict[str, list[int]]) -> "TaskRun":
        """The full model's run on ``missing``: remembered outcomes read, the rest scored (and remembered)."""
        from poptune.evaluate.judges import LIKELIHOOD_TASKS
        from poptune.evaluate.prompts import PROMPT_TASKS
        from poptune.evaluate.suite import PRIMARY_METRIC, TaskRun

        # Read only where nothing replays the full model's states (a certification, or no state reuse): a search
        # that reuses states runs the full model on its items anyway, and checks them against its stored run.
        answers = self.answers if self._led or self.states is None else None
        # A prompts file's details are per run, and a likelihood judge's POP side needs the full answers generated.
        local = (*PROMPT_TASKS, *LIKELIHOOD_TASKS)
        known = {t: answers.get(t, v) for t, v in missing.items()
                 if t not in local} if answers is not None else {}
        todo = {t: [i for i in v if i not in known.get(t, {})] for t, v in missing.items()}
        todo = {t: v for t, v in todo.items() if v}
        scored = None
        if todo:
            with progress.phase(f"full model accuracy ({sum(map(len, todo.values()))} items)", unit="request"):
                scored = self._score(PopConfig(skip=0), todo)
            self._mark_recorded(todo)
            if self.answers is not None:
                for task in todo:
                    if task not in local:
                        self.answers.put(task, dict(zip(scored.items[task], scored.outcomes[task])))
        if not any(known.values()):
            assert scored is not None
            return scored
        parts = {t: dict(known.get(t, {})) for t in missing}
        for task in todo:
            assert scored is not None  # todo is not empty: scored above
            parts[task].update(zip(scored.items[task], scored.outcomes[task]))
        outcomes = {t: [parts[t][i] for i in missing[t]] for t in missing}
        run = TaskRun({t: {PRIMARY_METRIC[t]: sum(v) / len(v)} for t, v in outcomes.items()},
                      {t: list(v) for t, v in missing.items()}, outcomes, dict(scored.details) if scored else {})
        return run

    def _mark_recorded(self, items: dict[str, list[int]]) -> None:
        if self.states is not None:
            for task, indices in items.items():
                self._recorded.setdefault(task, set()).update(indices)

    def _record_states(self, items: dict[str, list[int]]) -> None:
        """Before POP scores ``items`` with state reuse: the full model's states and answers of those whose
        full run was restored from storage (a resumed study), which this process has not recorded yet.

        The full model runs on exactly ``items``, in the call POP makes next, so that the rows (their padding
        included) are the ones POP replays; it must score them as stored, or the stored reference is not what
        this machine computes and the trial fails (:class:`~poptune.errors.MeasurementError`).
        """
        from poptune.errors import MeasurementError

        if self.states is None or self._full is None or self._led:
            return  # sharing (a certification): the full model's items were led by the trunk or are remembered
        todo = {t: v for t, v in items.items() if v and not self._recorded.get(t, set()).issuperset(v)}
        if not todo:
            return
        with progress.phase(f"full model states ({sum(map(len, todo.values()))} stored items)", unit="request"):
            rerun = self._score(PopConfig(skip=0), todo)
        for task, indices in rerun.items.items():
            stored = dict(zip(self._full.items.get(task, []), self._full.outcomes.get(task, [])))
            changed = [i for i, v in zip(indices, rerun.outcomes[task]) if i in stored and abs(v - stored[i]) > 1e-5]
            if changed:
                raise MeasurementError(
                    f"the full model no longer scores {task} items {changed[:5]} as the study stored them: its "
                    "stored reference is not what this machine computes (start a new study)")
        self._mark_recorded(todo)

    def restore_full_run(self, stored: dict[str, Any]) -> None:
        """Reuse the full model's outcomes stored with a resumed study (:meth:`stored_full_run`)."""
        from poptune.evaluate.suite import TaskRun

        self._full = TaskRun.from_dict(stored)

    def stored_full_run(self) -> dict[str, Any] | None:
        """The full model's run so far, to store with the study."""
        return self._full.to_dict() if self._full else None

    def full_accuracy(self) -> dict[str, float]:
        """The full model's accuracy per task on the first round's items (measured on first use)."""
        if self._legacy_full is not None:
            return dict(self._legacy_full)
        first = {t: min(self.problem.racing().start, self.workload.size(t)) for t in self.problem.tasks}
        return self.full_run(first).head(first).primary()

    def null_reference(self) -> dict[str, Any] | None:
        """A prompts study's null reference (:func:`poptune.evaluate.nullref.null_reference`) on the search's
        items (the first racing cap of the workload's order, the full run extended to them, as a race to the cap
        would): the full model's answers in another batch composition, scored as a configuration's. None when
        this process did not score the full model on them (its run restored from storage)."""
        from poptune.evaluate.answers import ITEMS_KEY
        from poptune.evaluate.nullref import null_reference
        from poptune.evaluate.prompts import PROMPT_TASKS

        p = self.problem
        if p.prompts is None:
            return None
        task = next(t for t in p.tasks if t in PROMPT_TASKS)
        n = min(p.racing().cap, self.workload.size(task))
        rows = self.full_run({task: n}).details.get(ITEMS_KEY, {})
        order = self.workload.order[task][:n]
        if any(i not in rows for i in order):
            return None
        with progress.phase(f"null reference ({n} prompts)", unit="request"):
            return null_reference(self.model, self.tokenizer, p.prompts, {i: rows[i] for i in order},
                                  batch_size=p.eval_batch_size)

    def reference_accuracy(self) -> float:
        """Mean over tasks of :meth:`full_accuracy`: the accuracy objective's reference."""
        from poptune.evaluate.suite import LOWER_IS_BETTER, PRIMARY_METRIC

        full = self.full_accuracy()
        higher = [t for t in full if PRIMARY_METRIC.get(t) not in LOWER_IS_BETTER] or list(full)
        return sum(full[t] for t in higher) / len(higher)

    def _latency(self, config: PopConfig, transform: Transform | None) -> tuple[Any, dict[int, float]]:
        from poptune.measure import RepeatPolicy
        from poptune.measure.bench import BenchSpec
        from poptune.models.vision import ImageSize

        p = self.problem
        points = self.latency_points()
        spec = BenchSpec(
            lengths=tuple(n for n, _ in points),
            batch_size=p.batch_size,
            decode_tokens=p.decode_tokens,
            policy=RepeatPolicy(warmup=1, min_repeats=p.repeats, min_seconds=0.0, precision=p.precision,
                                max_repeats=p.max_pairs, max_seconds=p.max_seconds),
            images=(ImageSize.parse(p.image),) if p.image is not None else (),
            null_check=False,  # the study times its A/A pairs once per run (poptune.tune.study)
        )
        bench = self.runtime.bench(self.model, self.tokenizer, config, spec, transform=transform)
        weights = {n: w for n, w in points} if p.weighted else {}
        return bench, weights

    def evaluate(
        self,
        config: PopConfig,
        *,
        transform: Transform | None = None,
        method: str = "pop",
        details: dict[str, Any] | None = None,
    ) -> Measurement:
        """Measure ``config``: prefill (and decode) latency against the full model, then raced task accuracy.

        Args:
            config: The POP configuration (``skip=0`` for none).
            transform: A baseline's model change, applied for the measured side's latency and its accuracy.
            method: ``pop`` or the baseline's name; ``details``: what the baseline is (stored with it).
        """
        from poptune.evaluate.paired import PairedDrop

        p = self.problem
        with applied(self.model, transform):
            config.check(self.num_layers)
        details = {**(details or {}), **self.prepare_kv(config)}
        timed = self._timed(config, transform)
        if config.skip == 0 and transform is None:  # the full model: no drop, by definition
            run = self.full_run()
            drop = PairedDrop.identical(run.counts)
        else:
            result = self._raced.pop(config, None) if transform is None else None
            if result is None:
                with progress.phase("accuracy", unit="round"):
                    result = self.race_accuracy(config, transform=transform)
            run, drop = result.run, result.drop
        full = self._full.head(run.counts) if self._full else run
        if p.prompts is not None:  # means of the prompt figures, never a prompt's text
            from poptune.evaluate.answers import summary

            details.update(summary(self._full, run))
        return Measurement(
            config=config,
            method=method,
            details=dict(details or {}),
            target_length=self.target_length,
            accuracy=run.primary(),
            full_accuracy=full.primary(),
            items=run.counts,
            drop=drop.to_dict(),
            reference_accuracy=self.reference_accuracy(),
            outcomes=run.outcomes,
            **timed,
        )

    def race_accuracy(self, config: PopConfig, *, transform: Transform | None = None, fresh: int = 0,
                      policy: "RacingPolicy | None" = None, confidence: float = 0.95,
                      futility: bool = False,
                      resize: Callable[[float, int], tuple[int, bool]] | None = None) -> "RaceResult":
        """Race ``config``'s accuracy against the full model (:func:`poptune.evaluate.racing.race`).

        Args:
            config: The configuration; ``transform``: a baseline's model change.
            fresh: Skip the first ``fresh`` items of every task's order (a certification races on items after
                the search's: positions ``fresh, fresh + 1, ...``).
            policy: Round sizes and cap (default: the problem's racing); ``confidence``: the drop interval's.
            futility: Give up, non-binding, once a verdict within the budget has become hopeless
                (:func:`poptune.evaluate.racing.race`); ``resize``: the race's cap set from what its first round
                cost (the same function's).
        """
        from poptune.evaluate.racing import race

        p = self.problem
        workload = self.workload.after(fresh) if fresh else self.workload

        def full(counts: dict[str, int]) -> "TaskRun":
            return self.full_run({t: fresh + n for t, n in counts.items()}).tail(fresh)

        return race(workload, policy or p.racing(), score=self._scorer(config, transform), full=full,
                    max_drop=p.max_drop, seed=p.seed, confidence=confidence, futility=futility, resize=resize)

    def _scorer(self, config: PopConfig, transform: Transform | None = None
                ) -> Callable[[dict[str, list[int]]], "TaskRun"]:
        """What a race of ``config`` scores its rounds with: the full model's states of a resumed study's stored
        items recorded first (:meth:`_record_states`), a baseline's ``transform`` applied."""
        def score(items: dict[str, list[int]]) -> "TaskRun":
            if transform is None:
                self._record_states(items)
            with applied(self.model, transform):
                return self._score(config, items, reuse=transform is None)

        return score

    def race_together(self, configs: "Sequence[PopConfig]") -> None:
        """Race the accuracy of ``configs`` (a batch of a study's trials) round by round together
        (:func:`poptune.evaluate.racing.race_together`); each result waits for :meth:`evaluate` of its
        configuration, which then races nothing.

        Each batch of a round is scored once for every configuration still racing (a
        :class:`~poptune.engine.trunk.SharedTrunk` of peers): their prefills replay the full model's recorded
        states (state reuse) and their greedy decodes are stacked. Every race is the one :meth:`race_accuracy`
        runs alone, outcome for outcome.
        """
        from poptune.evaluate.racing import race_together

        configs = [c for c in dict.fromkeys(configs) if c.skip > 0 and c not in self._raced]
        if not configs:
            return
        p = self.problem
        with self.sharing(configs, peers=True) as trunk, \
                progress.phase(f"accuracy of {len(configs)} configurations together", unit="round"):
            results = race_together(self.workload, p.racing(), scores=[self._scorer(c) for c in configs],
                                    full=self.full_run, max_drop=p.max_drop, seed=p.seed,
                                    racing=lambda alive: trunk.racing([configs[i] for i in alive]))
        self._raced.update(zip(configs, results))

    def score_first(self, config: PopConfig, counts: dict[str, int], *,
                    transform: Transform | None = None, skip: int = 0) -> "TaskRun":
        """``config`` (with a baseline's ``transform``) scored on ``counts[task]`` items of every task's fixed
        order from position ``skip`` on: the same items for every method it is called with. Within
        :meth:`sharing`, the full model's call also scores the shared POP configurations, and theirs are served;
        a baseline's changed model never shares."""
        items = {t: self.workload.order[t][skip:skip + n] for t, n in counts.items()}
        with applied(self.model, transform):
            return self._score(config, items, reuse=transform is None and self._trunk is not None)

    def retime(self, measurement: Measurement) -> Measurement:
        """``measurement`` with its latency timed again (a POP configuration's; its accuracy kept: the items'
        outcomes do not depend on how busy the machine was)."""
        return replace(measurement, **self._timed(measurement.config, None))

    def prepare_kv(self, config: PopConfig) -> dict[str, Any]:
        """Make the model ready for ``config``'s K/V source (:func:`poptune.kvfit.prepare.prepare_kv`: calibrated
        K/V's maps fitted once per block and machine, then read from the cache); what was prepared, for the
        measurement's details. Maps are fitted on the workload's calibration split (:meth:`kv_fit_spec`)."""
        from poptune.kvfit.prepare import kv_details, prepare_kv
        from poptune.models import weights_fingerprint

        p = self.problem
        prepared = prepare_kv(self.model, self.tokenizer, config, fingerprint=weights_fingerprint(p.model, p.weights),
                              fitter=self._fitter)
        return kv_details(config, prepared)

    def _fitter(self) -> "KVFitter":
        """The study's one fitter of K/V maps (one residual stream of calibration text for every block), made on
        first use: finding its prompts reads the workload."""
        from poptune.kvfit.fit import KVFitter
        from poptune.models import weights_fingerprint

        if self._kv_fitter is None:
            p = self.problem
            self._kv_fitter = KVFitter(self.model, self.tokenizer, self.kv_fit_spec(),
                                       weights_fingerprint(p.model, p.weights))
        return self._kv_fitter

    def kv_fit_spec(self) -> "KVFitSpec":
        """How the study's maps are fitted: on prompts of its own tasks that it never scores (the last
        :data:`KV_PROMPTS` of each task's fixed order beyond its racing and certification items,
        :func:`poptune.evaluate.workload.calibration_prompts`), else -- none left -- WikiText-2 validation."""
        from poptune.evaluate.workload import calibration_prompts
        from poptune.kvfit.fit import PROMPT_TOKENS, KVFitSpec

        p = self.problem
        prompts, source = calibration_prompts(self.tokenizer, self.workload, data_dir=p.data_path(),
                                              count=KV_PROMPTS, max_tokens=PROMPT_TOKENS, prompts_file=p.prompts)
        if not prompts:
            return KVFitSpec(data_dir=p.data_dir)
        return KVFitSpec(data_dir=p.data_dir, prompts=tuple(prompts), prompts_source=source)

    def _timed(self, config: PopConfig, transform: Transform | None) -> dict[str, Any]:
        """The latency fields of a :class:`Measurement` of ``config``, timed now."""
        self.prepare_kv(config)
        with progress.phase("latency", unit="pair"):
            bench, weights = self._latency(config, transform)
        check = bench.null_check
        if check is not None and config.skip == 0 and transform is None:  # its pairs are an A/A check
            from poptune.measure.nullcheck import figures

            longest = bench.rows[-1]
            check.aa, check.length = figures(longest.prefill), longest.length
        target = next(row for row in bench.rows if row.length == self.target_length).energy_figures()
        return dict(latency={row.length: row.summary() for row in bench.rows}, latency_weights=weights,
                    energy_j=target["energy_pop_j"], energy_reason=target["energy_reason"],
                    hardware=bench.hardware.to_dict(),
                    versions=bench.versions, null_check=check.to_dict() if check else {},
                    provenance=bench.provenance)

    def evaluate_baseline(self, baseline: "Baseline") -> Measurement:
        """Measure a baseline exactly as a POP configuration: same prompts, lengths, tasks and timer."""
        return self.evaluate(baseline.pop, transform=baseline.transform, method=baseline.method,
                             details=baseline.describe())
