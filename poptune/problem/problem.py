"""A tuning problem: model x task suite x prompt lengths (the hardware is where it runs), and its reward."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry
from poptune.objectives.registry import DEFAULT as DEFAULT_OBJECTIVES
from poptune.objectives.registry import check as check_objectives
from poptune.objectives.registry import check_problem
from poptune.problem.presets import STANDARD
from poptune.store.measurement import Measurement

if TYPE_CHECKING:
    from poptune.evaluate.racing import RacingPolicy

__all__ = ["DEFAULT_MAX_DROP", "STUDY_TASKS", "TuningProblem", "default_tasks", "reward"]

#: The accuracy budget in points unless a problem says otherwise (``None``: no budget).
DEFAULT_MAX_DROP = 2.0

#: A study's tasks with a data directory: long real prompts, where prefill (and so POP) matters.
STUDY_TASKS = ("longctx_squad", "longctx_qasper")

#: The tasks that need no data directory.
EMBEDDED_TASKS = ("passkey", "kv_recall")


def default_tasks(has_data: bool) -> tuple[str, ...]:
    """A problem's tasks unless it names them: :data:`STUDY_TASKS` with a data directory, else the embedded ones."""
    return STUDY_TASKS if has_data else EMBEDDED_TASKS


#: Reward lost per accuracy point beyond the budget (see :func:`reward`).
PENALTY_PER_POINT = 0.5


@dataclass(frozen=True)
class TuningProblem:
    """What one environment (and one study) measures.

    Attributes:
        model: poptune model name.
        tasks: Accuracy tasks (real lm-eval tasks and/or ``passkey``/``kv_recall``), or all of them judged by the
            likelihood of the full model's answer (``longctx_squad:likelihood``, :mod:`poptune.evaluate.judges`):
            ``max_drop`` then bounds the drop of that likelihood, not accuracy.
        lengths: Prompt lengths of the synthetic tasks' passkey items (the latency objective is timed at the
            lengths of the prompts the workload scores, see :meth:`poptune.evaluate.workload.Workload.latency_points`);
            of an image problem or with ``latency_points=0``, the lengths timed (``target_length``, default the
            first, is the objective).
        limit: Items per task at most (the racing cap); ``items_start`` in the first round.
        data_dir: Where the real task files are.
        max_drop: Accuracy budget in points for the reward and the study's constraint (default
            :data:`DEFAULT_MAX_DROP`, as the command line's; None: no budget).
        device, dtype, weights: As :func:`poptune.load_model`.
        batch_size: Prompts per timed forward.
        repeats: Least POP/full pairs per latency measurement (6: the fewest whose 95% interval of the speedup
            reaches 95%, :data:`~poptune.measure.stats.MIN_PAIRS_95`; fewer give the pairs' range, with its lower
            coverage recorded; 3 before).
        precision: Pairs continue until the speedup's 95% interval is +- this fraction of it (None: stop at
            ``repeats``), within ``max_pairs`` pairs and ``max_seconds`` per measurement (judged from 6 pairs on).
            The defaults kept a Gemma-3-270M trial's latency at 512 tokens near 10-20 s on a 2-core CPU with 3
            least pairs; 6 cost at most twice the pairs where 3 already passed ``max_seconds`` (decode pairs,
            long prompts), and one more prefill pair at 512 tokens (about 0.6 s; estimated, not re-measured).
        decode_tokens: New tokens per decode-latency measurement (0: none).
        seed: Seed of synthetic tasks.
        image: ``"WIDTHxHEIGHT"`` for a vision-language model: the timed prompt is then one image of that size
            and a short question (its token count is the target length) instead of text of ``lengths``.
            Accuracy is still measured on ``tasks``.
        items_start: Items per task in the first racing round (:mod:`poptune.evaluate.racing`).
        halfwidth: Without ``max_drop``, racing stops once the drop's 95% interval is this narrow (points).
        latency_points: Prompt lengths of the workload timed per trial (quantile groups of its prompts); 0 times
            ``lengths`` instead.
        kv: The K/V sources searched for the skipped block (names of :mod:`poptune.kv.registry`): ``("own",)``, the
            default, is the paper's space (fitting maps costs minutes of a 20-minute default study; the fit before
            issue 38 lost to the layers' own K/V on LAMBADA's BOS-led passages at skip 9); with ``calibrated``, maps
            fitted per block (:mod:`poptune.kvfit`) are a search
            dimension. Studies stored before it read as ``("own",)``.
        certify_limit: Items per task at most on which the front's candidates are certified after the search:
            items no trial scored (:mod:`poptune.tune.certify`); 0: no certification.
        certify_candidates: The front's fastest candidates certified (the error is split among them).
        prompts: A user's prompts file (:mod:`poptune.evaluate.prompts`), the items of task ``prompts``: accuracy
            is then the share of greedy answers unchanged from the full model's, the drop the share changed
            (``max_drop`` 5: answers changed at most 5%); or of task ``prompt_references`` (its requests with a
            reference answer): accuracy is the share of answers containing their reference, the drop the paired
            drop on them. Only its path is stored, never a prompt's text.
        store_prompts: Store the prompts' text with the study too (default: only their hashes and lengths).
        objectives: The study's objectives by name (:mod:`poptune.objectives.registry`), in the order of its
            trials' values: ``("ttft", "accuracy")`` by default (every study stored before they had names), or
            any two or more of the registry's, each given what it requires of the problem
            (:attr:`~poptune.objectives.base.Objective.requires`: ``tpot`` needs ``decode_tokens``).
        prompts_sha256: The SHA-256 of the prompts file's bytes (:func:`poptune.evaluate.prompts.prompts_sha256`):
            a resumed study compares it, not the file's path (None: a study stored before it, compared by path).
        runtime: Where the configurations are timed and scored (:data:`poptune.problem.runtime.RUNTIMES`): ``hf``,
            poptune's engine on the Hugging Face model, or ``vllm``, vLLM with poptune's plugin.
    """

    model: str = "gemma-3"
    tasks: tuple[str, ...] = EMBEDDED_TASKS
    lengths: tuple[int, ...] = (512,)
    target_length: int | None = None
    limit: int | None = STANDARD.limit
    data_dir: str | None = None
    max_drop: float | None = DEFAULT_MAX_DROP
    device: str = "cpu"
    dtype: str | None = None
    weights: str = "pretrained"
    batch_size: int = 1
    repeats: int = 6
    precision: float | None = 0.02
    max_pairs: int = STANDARD.max_pairs
    max_seconds: float = STANDARD.max_seconds
    decode_tokens: int = 4
    seed: int = 0
    eval_batch_size: int = 8
    image: str | None = None
    items_start: int = STANDARD.items
    halfwidth: float = 2.0
    latency_points: int = 2
    kv: tuple[str, ...] = (kv_registry.DEFAULT,)
    certify_limit: int = STANDARD.certify
    certify_candidates: int = 1
    prompts: str | None = None
    store_prompts: bool = False
    prompts_sha256: str | None = None
    objectives: tuple[str, ...] = DEFAULT_OBJECTIVES
    runtime: str = "hf"

    def __post_init__(self) -> None:
        if self.image is not None:
            from poptune.models.vision import ImageSize

            ImageSize.parse(self.image)
        if not self.tasks:
            raise ConfigError("a tuning problem needs at least one task")
        from poptune.evaluate.prompts import PROMPT_TASKS
        from poptune.evaluate.suite import task_names

        object.__setattr__(self, "tasks", task_names(self.tasks))  # one name alone is one task

        if bool(set(PROMPT_TASKS) & set(self.tasks)) != (self.prompts is not None):
            raise ConfigError("task `prompts` and a prompts file go together: give both or neither")
        if self.store_prompts and self.prompts is None:
            raise ConfigError("`--store-prompts` goes with `--prompts FILE` (it stores that file's prompts)")
        if len(set(PROMPT_TASKS) & set(self.tasks)) > 1:  # one file, one judge: its report and records say one
            raise ConfigError(f"a prompts file is judged one way at a time: give one of {', '.join(PROMPT_TASKS)}, "
                              f"got {list(self.tasks)}")
        from poptune.evaluate.judges import check_one_judge

        check_one_judge(self.tasks)  # likelihood-judged tasks (``T:likelihood``) never beside accuracy-judged ones
        if not self.lengths or any(not isinstance(n, int) or n < 2 for n in self.lengths):
            raise ConfigError(f"prompt lengths must be integers >= 2, got {list(self.lengths)}")
        if self.target_length is not None and self.target_length not in self.lengths:
            raise ConfigError(f"`target_length` {self.target_length} must be one of the lengths {list(self.lengths)}")
        if self.max_drop is not None and (isinstance(self.max_drop, bool)
                                          or not isinstance(self.max_drop, (int, float))):  # issue 87: a TypeError
            raise ConfigError(f"`max_drop` must be accuracy points (a number >= 0) or None, got {self.max_drop!r}")
        if self.max_drop is not None and (not math.isfinite(self.max_drop) or self.max_drop < 0):
            raise ConfigError(f"`max_drop` must be >= 0 accuracy points, got {self.max_drop}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"`limit` must be a positive integer, got {self.limit}")
        if self.latency_points < 0:
            raise ConfigError(f"`latency_points` must be >= 0, got {self.latency_points}")
        if not self.kv or len(set(self.kv)) != len(self.kv):
            raise ConfigError(f"`kv` must be distinct K/V sources, at least one, got {list(self.kv)}")
        for name in self.kv:
            kv_registry.source(name, what="each of `kv`")
        self.racing()  # validates items_start, limit and halfwidth
        self._check_synthetic_supply()
        for name in ("certify_limit", "certify_candidates"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"`{name}` must be an integer >= 0, got {value!r}")
        if self.repeats < 1:
            raise ConfigError(f"`repeats` must be >= 1, got {self.repeats}")
        if self.max_pairs < self.repeats:
            raise ConfigError(f"`max_pairs` must be >= `repeats` ({self.repeats}), got {self.max_pairs}")
        if self.precision is not None and not 0 < self.precision < 1:
            raise ConfigError(f"`precision` must be in (0, 1), got {self.precision}")
        if not self.max_seconds > 0:
            raise ConfigError(f"`max_seconds` must be > 0, got {self.max_seconds}")
        check_problem(check_objectives(self.objectives), self)
        from poptune.problem import runtime

        runtime.check(self)

    def _check_synthetic_supply(self) -> None:
        """A synthetic task's items are built up front: a cap beyond what its generator gives is refused."""
        from poptune.evaluate.synthetic import EMBEDDED
        from poptune.evaluate.workload import SYNTHETIC_MAX

        synthetic = [t for t in self.tasks if t in EMBEDDED]
        certify = self.certify_limit if isinstance(self.certify_limit, int) and self.max_drop is not None else 0
        if synthetic and (self.limit is None or self.limit + max(certify, 0) > SYNTHETIC_MAX):
            raise ConfigError(f"`limit` {self.limit} + `certify_limit` {certify} items per task: synthetic task "
                              f"{synthetic[0]} supplies at most {SYNTHETIC_MAX}")

    def dtype_named(self) -> "TuningProblem":
        """This problem with its dtype named (None: the device's native precision on this machine,
        :func:`poptune.device.dtype_name`): what a study records and its evaluator loads, never a default that
        another machine or version reads otherwise."""
        from dataclasses import replace

        from poptune.device import dtype_name

        return self if self.dtype is not None else replace(self, dtype=dtype_name(None, self.device))

    @property
    def judge(self) -> str:
        """What ``max_drop`` bounds: ``accuracy`` (each task's metric, or a prompts file's judge) or
        ``likelihood`` (task-pack tasks judged by the full answer's likelihood, :mod:`poptune.evaluate.judges`)."""
        from poptune.evaluate.judges import judge_of

        return judge_of(self.tasks)

    @property
    def target(self) -> int:
        """The text prompt length of the latency objective (an image problem's is known once it is built)."""
        return self.target_length if self.target_length is not None else self.lengths[0]

    @property
    def target_label(self) -> str:
        """What the latency objective times: ``512`` (tokens) or ``image-640x480``."""
        return f"image-{self.image}" if self.image is not None else str(self.target)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TuningProblem":
        data = dict(data)  # a field it lacks takes its default (a stored study's: poptune.store.attributes)
        for key in ("tasks", "lengths", "kv", "objectives"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)

    def data_path(self) -> Path | None:
        return Path(self.data_dir) if self.data_dir else None

    def racing(self) -> "RacingPolicy":
        """How many items a trial's accuracy may take."""
        from poptune.evaluate.racing import RacingPolicy

        cap = self.limit if self.limit is not None else 1_000_000
        return RacingPolicy(start=min(self.items_start, cap), cap=cap, target_halfwidth=self.halfwidth)

    @property
    def certifies(self) -> bool:
        """Whether the study certifies its front on fresh items after the search (a budget and a cap)."""
        return self.max_drop is not None and self.certify_limit > 0

    @property
    def synthetic_lengths(self) -> tuple[int, ...]:
        """Prompt lengths of synthetic passkey items: ``lengths`` (an image problem's lengths time nothing)."""
        return self.lengths if self.image is None else (256,)

    @property
    def weighted(self) -> bool:
        """Whether latency is timed at the workload's prompt lengths (not ``lengths``)."""
        return self.latency_points > 0 and self.image is None


def reward(measurement: Measurement, max_drop: float | None) -> float:
    """The scalar reward: prefill speedup, minus 0.5 per accuracy point beyond the budget.

    ``reward = speedup - 0.5 * max(0, drop_points - max_drop)`` (no penalty without a budget). A configuration
    within budget is rewarded by its speedup alone; one beyond it loses half a unit of speedup per point.
    """
    excess = 0.0 if max_drop is None else max(0.0, measurement.drop_points - max_drop)
    return measurement.speedup - PENALTY_PER_POINT * excess
