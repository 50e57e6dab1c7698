"""What the GPU check measures, and the thresholds it fails on: the full plan (one large GPU) and ``--tiny``.

The full plan follows the paper's settings (arXiv 2602.03295): Llama-3.1-8B skip 10 of 32, Gemma-3-12B skip
1/3 (16 of 48), Qwen3-VL-8B skip 12 of 36 with one 1280x720 image; full-size architectures with random bf16
weights built on the GPU (latency does not depend on weight values). The tiny plan runs the same code on
tiny random models in seconds, on CPU in the test suite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

from poptune.measure import RepeatPolicy
from poptune.measure.energy import ENERGY_BLOCKS
from poptune.measure.flops import prefill_flops
from poptune.measure.nullcheck import AA_PAIRS
from poptune.measure.stats import pairs_for
from poptune.models import configs
from poptune.models.vision import ImageSize

__all__ = ["AA_TOLERANCE", "ADMIT_FACTOR", "ADMIT_ROW_SECONDS", "Case", "DECODE_TOLERANCE", "IDEAL_SLACK",
           "LAUNCH_BOUND_BUSY", "MIN_PAIRS", "Plan", "TARGET", "Target", "case_rows", "case_seconds", "full_plan",
           "parameters",
           "plan_seconds", "row_seconds", "stage_seconds", "tiny_plan", "wide"]

#: The fewest timed pairs of a row of the full plan, whatever its seconds.
MIN_PAIRS = 12
#: A/A (full against full) may read 1 +- this before the check fails.
AA_TOLERANCE = 0.02
#: POP's decode against the full model's (identical work) may read 1 +- this.
DECODE_TOLERANCE = 0.03
#: A measured speedup above its FLOPs ideal times this fails the check.
IDEAL_SLACK = 1.05
#: Below this share of a prefill's wall time with a kernel running, the row is launch-bound: the timer sees
#: dispatch, not compute.
LAUNCH_BOUND_BUSY = 0.5


def wide(row: dict, precision: float | None) -> bool:
    """Whether a measured row's interval of its speedup is wider than ``+-precision`` of it (the plan's target):
    such a row is measured again where time allows, and the summary says so where it stays wide."""
    if precision is None:
        return False
    return (row["speedup_hi"] - row["speedup_lo"]) / 2 / row["speedup"] > precision


@dataclass(frozen=True)
class Case:
    """One model of the plan: its rows are every length (or the image) at every batch size, except those of more
    than ``max_tokens`` tokens (length times batch), whose time the plan's budget has no room for."""

    model: str
    skip: int
    lengths: tuple[int, ...] = ()
    batches: tuple[int, ...] = (1,)
    image: ImageSize | None = None
    max_tokens: int | None = None
    batched: tuple[int, ...] | None = None  # the lengths timed at batch sizes above 1 (None: all of them)
    energy_at: tuple[tuple[int, int], ...] | None = None  # the (length, batch) rows with energy blocks (None: all)
    #: The (length, or None for the image; batch) rows timed a second time with CUDA graphs on both sides (POP and
    #: the full model captured alike; ``--graphs``), without energy blocks.
    graphs_at: tuple[tuple[int | None, int], ...] = ()

    def energy(self, length: int | None, batch: int) -> bool:
        """Whether the row at ``length`` (None: the image) and ``batch`` times energy blocks."""
        return self.energy_at is None or (length, batch) in self.energy_at

    def lengths_at(self, batch: int) -> tuple[int, ...]:
        """The lengths timed at ``batch``."""
        chosen = self.lengths if batch == 1 or self.batched is None else self.batched
        return tuple(n for n in chosen if self.max_tokens is None or n * batch <= self.max_tokens)


@dataclass(frozen=True)
class Target:
    """The row the issue's acceptance names: model, length, batch, least speedup and least share of the ideal."""

    model: str
    length: int
    batch: int
    speedup: float
    of_ideal: float


#: Llama-3.1-8B skip 10 at 2048 tokens, batch 8: the paper's A100 figure is 1.36x.
TARGET = Target("llama-3.1", 2048, 8, 1.35, 0.9)


@dataclass(frozen=True)
class Plan:
    """The whole check: cases, the null-check case, the real-weights scoring model, timing and energy."""

    tiny: bool
    cases: tuple[Case, ...]
    null_case: Case  # A/A at its first length and a decode null check
    decode_tokens: int
    policy: RepeatPolicy
    energy_seconds: float
    scores_model: str
    scores_skip: int
    scores_items: int = 50
    scores_context: int = 128
    scores_continuation: int = 8
    #: The prefill rate the plan's time estimates assume (TFLOP/s): an assumption of the arithmetic, not a
    #: measurement. The full plan takes half the H200's dense BF16 peak (989 TFLOP/s, NVIDIA's datasheet).
    tflops: float = 494.5
    #: Whether the plan has the scores stage (the real Gemma-3-270M on the GPU against the CPU). The full plan has
    #: not: its 245 MB of weights are not on the device, so there it could only ever say SKIP (issue 89).
    scores: bool = True


def full_plan() -> Plan:
    """The plan for one large GPU: about 4.5 minutes on an H200 by its own arithmetic (:func:`stage_seconds`:
    rows, model builds, the first import and the profiler passes), sized so that one device call of about
    5 minutes holds it and a short second call can redo a stage (docs/gpu-check.md)."""
    return Plan(
        tiny=False,
        cases=(
            # Batch 8 at the target's length only, and energy blocks on the target row only (issue 59: each
            # energy row costs ~20 s more, and Llama and Gemma must both fit one call of 390 s, 650 s left).
            # Issue 89: 512 and 2048 at batch 1 (and Qwen's image) again with CUDA graphs on both sides.
            Case("llama-3.1", 10, (512, 2048, 8192), (1, 8), batched=(2048,), energy_at=((2048, 8),),
                 graphs_at=((512, 1), (2048, 1))),
            Case("gemma-3-12b", 16, (2048,), (1, 8)),  # past the 1024-token sliding window
            Case("qwen3-vl", 12, image=ImageSize(1280, 720), graphs_at=((None, 1),)),
        ),
        null_case=Case("llama-3.1", 10, (2048, 512)),  # A/A at both; decode at the first
        decode_tokens=16,
        # Issue 89: at least MIN_PAIRS pairs as well as a second, so that every row's interval is an interval (8,192
        # tokens and batch 8 stopped at 6-7 pairs under the 3 s cap: their "95% CI" was the pairs' range).
        policy=RepeatPolicy(warmup=2, warmup_seconds=1.0, min_repeats=MIN_PAIRS, min_seconds=1.0, max_repeats=40,
                            precision=0.02, max_seconds=3.0),
        energy_seconds=1.0,
        scores_model="gemma-3",
        scores_skip=6,
        scores=False,
    )


def tiny_plan() -> Plan:
    """The same check on tiny random models: seconds on a CPU."""
    return Plan(
        tiny=True,
        cases=(
            Case("tiny-llama", 2, (24, 48), (1, 2)),
            Case("tiny-gemma3", 2, (24,)),
            Case("tiny-qwen3-vl", 2, image=ImageSize(64, 48)),
        ),
        null_case=Case("tiny-llama", 2, (24,)),
        decode_tokens=2,
        policy=RepeatPolicy(warmup=0, min_repeats=3, min_seconds=0.0, max_repeats=3),
        energy_seconds=1.0,  # no block runs without NVML: the rows say why
        scores_model="tiny-gemma3",
        scores_skip=2,
        scores_items=50,
        scores_context=32,
        scores_continuation=4,
    )


# ----------------------------------------------------------------------------------------------------------------
# The plan's own arithmetic: how long each stage is expected to take, from its policy, its energy blocks and the
# FLOPs of its prefills at the plan's assumed rate (case_seconds), and what admitting a stage adds to that: the
# model build, the first import of transformers, the profiler's start-ups and each row's set-up (stage_seconds).
# The vision encoder of image rows is counted as text prompts of their image-token count; the report records
# every stage's measured seconds beside what was expected. A stage is admitted only with a margin over its
# estimate (``admit``: ADMIT_FACTOR times it, plus ADMIT_ROW_SECONDS a row): the estimates are assumptions.

_ALIGN_S = 0.5  # the energy blocks' longest wait for a counter step at either end (poptune.measure.energy)
_RUN_AHEAD = 2  # calls an energy block's host runs ahead of the device (poptune.measure.energy.RUN_AHEAD)

#: Seconds the idle block is expected to wait for the GPU to settle before each row (at least 1 s, at most 5 s:
#: poptune.measure.energy.SETTLE_MIN_S and SETTLE_MAX_S). An assumption, like the ones below: none is measured.
SETTLE_SECONDS = 2.0
#: The first import of transformers and the model classes in a fresh process on a fresh machine (cold disk).
IMPORT_SECONDS = 15.0
#: Building a model of random bf16 weights on the GPU: fixed, plus per billion parameters (allocation and
#: initialisation kernels, transformers' module construction).
BUILD_SECONDS = 5.0
BUILD_SECONDS_PER_BILLION = 2.0
#: The profiler's first start in a process (CUPTI's initialisation), and each later profiled row's start and stop.
PROFILER_FIRST_SECONDS = 5.0
PROFILER_ROW_SECONDS = 1.0
#: Each bench run's own set-up: NVML's initialisation and the provenance record's ``git`` call.
ROW_SETUP_SECONDS = 1.5
#: One eager decode step of a full-size model at batch 1 (launch-bound: dispatch, not compute).
DECODE_STEP_SECONDS = 0.025
#: A stage is admitted only when ADMIT_FACTOR x its estimate + ADMIT_ROW_SECONDS per row fits what is left.
ADMIT_FACTOR = 1.25
ADMIT_ROW_SECONDS = 2.0


def _prompt_tokens(case: Case, model_config: dict) -> tuple[int, ...]:
    if case.image is None:
        return case.lengths
    vision = model_config.get("vision_config") or {}
    side = (vision.get("patch_size") or 14) * (vision.get("spatial_merge_size") or 1)  # pixels per image token
    # The processor resizes each side to a multiple of ``side``, rounding up: 1280x720 at 32 is 1280x736, 920
    # tokens (issue 59: not 880).
    return (math.ceil(case.image.width / side) * math.ceil(case.image.height / side),)


def _call_seconds(plan: Plan, case: Case, tokens: int, batch: int) -> float:
    """Seconds of one full-model prefill at the plan's rate (POP's is shorter; both counted at this)."""
    config = configs.full_config(case.model) or configs.tiny_config(case.model)
    assert config is not None, case.model  # every case names a registered configuration
    unset = dict.fromkeys(("layer_types", "sliding_window", "head_dim", "num_key_value_heads"))
    text = SimpleNamespace(**{**unset, **config.get("text_config", config)})
    return batch * prefill_flops(text, tokens, attention="sdpa") / (plan.tflops * 1e12)


def _block_seconds(plan: Plan, call: float) -> float:
    """One energy block: its lead-in to a counter step (a call at least), its seconds and the call that overruns
    them, the drain of the calls run ahead, and the tail to the closing step (a call at least)."""
    return plan.energy_seconds + (1 + _RUN_AHEAD) * call + 2 * max(_ALIGN_S, call)


def row_seconds(plan: Plan, case: Case, tokens: int, batch: int, *, energy: bool = True) -> float:
    """Expected seconds of one row: warm-up, timed pairs (up to the policy's time cap while chasing precision),
    each side's energy blocks where ``energy`` (:func:`_block_seconds`) and the profiler pass (two calls)."""
    call = _call_seconds(plan, case, tokens, batch)
    pair, policy = 2 * call, plan.policy
    least = max(policy.min_repeats, pairs_for(policy.confidence) if policy.precision else 0)
    warmup = max(policy.warmup * pair, policy.warmup_seconds) + pair
    timed = max(least * pair, policy.max_seconds or policy.min_seconds) + pair
    blocks = 2 * ENERGY_BLOCKS * _block_seconds(plan, call) if plan.energy_seconds and energy else 0.0
    return warmup + timed + blocks + 2 * call


def case_rows(plan: Plan, case: Case) -> list[tuple[int, int]]:
    """The (prompt tokens, batch) of each row of ``case``, in the order measured (its graphed rows last)."""
    config = configs.full_config(case.model) or configs.tiny_config(case.model) or {}
    tokens = _prompt_tokens(case, config)
    eager = [(n, b) for b in case.batches for n in (case.lengths_at(b) if case.image is None else tokens)]
    graphed = [(tokens[0] if n is None else n, b) for n, b in case.graphs_at]
    return eager + graphed


#: Calls of each side a graphed row adds to an eager one: the capture's warm-up calls (poptune.measure.graphs), the
#: capture and its first replay.
GRAPH_CALLS = 4


def _idle_seconds(plan: Plan) -> float:
    return plan.energy_seconds + 2 * _ALIGN_S + SETTLE_SECONDS if plan.energy_seconds else 0.0


def _null_seconds(plan: Plan, case: Case) -> float:
    """The null checks' bench run (no energy blocks): its prefill row, the A/A pairs and the decode pairs, each
    decode side a prefill and ``decode_tokens`` eager steps, timed in rounds like the prefill pairs."""
    policy, total = plan.policy, 0.0
    for i, n in enumerate(plan.null_case.lengths):  # an A/A at each length, the decode pairs at the first
        call = _call_seconds(plan, case, n, 1)
        total += row_seconds(plan, case, n, 1, energy=False) + max(AA_PAIRS * 2 * call, policy.min_seconds)
        total += policy.warmup_seconds
        if i == 0:
            pair = 2 * (call + plan.decode_tokens * (DECODE_STEP_SECONDS if not plan.tiny else 0.0))
            total += max(policy.warmup * pair, policy.warmup_seconds) + pair + max(
                policy.min_repeats * pair, policy.max_seconds or policy.min_seconds)
    return total


def case_seconds(plan: Plan, case: Case) -> float:
    """Expected seconds of one model's rows: each row (one bench run, so its idle block after the GPU settles
    where it times energy), and the null checks (:func:`_null_seconds`) on the null case's model. Builds,
    imports, profiler start-ups and each run's set-up: :func:`stage_seconds`."""
    rows = case_rows(plan, case)
    eager, graphed = rows[:len(rows) - len(case.graphs_at)], rows[len(rows) - len(case.graphs_at):]
    flagged = [(n, b, case.energy(None if case.image else n, b)) for n, b in eager]
    total = sum(row_seconds(plan, case, n, b, energy=e) + (_idle_seconds(plan) if e else 0.0) for n, b, e in flagged)
    total += sum(row_seconds(plan, case, n, b, energy=False) + 2 * GRAPH_CALLS * _call_seconds(plan, case, n, b)
                 for n, b in graphed)
    if case.model == plan.null_case.model:
        total += _null_seconds(plan, case)
    return total


def parameters(config: dict) -> float:
    """About how many parameters a config builds (attention, MLP, embeddings, a vision tower's blocks)."""
    text = config.get("text_config", config)
    hidden, heads = text["hidden_size"], text["num_attention_heads"]
    kv, head_dim = text.get("num_key_value_heads") or heads, text.get("head_dim") or hidden // heads
    layer = hidden * head_dim * 2 * (heads + kv) + 3 * hidden * text["intermediate_size"]
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    vision = config.get("vision_config") or {}
    width, depth = vision.get("hidden_size", 0), vision.get("depth") or vision.get("num_hidden_layers") or 0
    tower = depth * (4 * width * width + 2 * width * vision.get("intermediate_size", 0))
    return text["vocab_size"] * hidden * (1 if tied else 2) + text["num_hidden_layers"] * layer + tower


def stage_seconds(plan: Plan, case: Case, *, first_import: bool, first_profile: bool) -> dict[str, float]:
    """What admitting ``case``'s stage counts, by part: ``rows`` (:func:`case_seconds`), ``build`` (random weights
    on the device), ``import`` (transformers' first import, where this stage makes it), ``profiler`` (one pass
    per row, its first start included where this stage makes it), ``setup`` (each bench run's NVML start and
    provenance), their ``total``, and ``admit``: the seconds that must be left to start it (the margin)."""
    config = configs.full_config(case.model) or configs.tiny_config(case.model) or {}
    rows = len(case_rows(plan, case))
    runs = rows + (len(plan.null_case.lengths) if case.model == plan.null_case.model else 0)
    parts = {
        "rows": case_seconds(plan, case),
        "build": BUILD_SECONDS + BUILD_SECONDS_PER_BILLION * parameters(config) / 1e9 if not plan.tiny else 1.0,
        "import": IMPORT_SECONDS if first_import else 0.0,
        "profiler": rows * PROFILER_ROW_SECONDS + (PROFILER_FIRST_SECONDS if first_profile else 0.0),
        "setup": runs * ROW_SETUP_SECONDS,
    }
    total = sum(parts.values())
    return {**parts, "total": total, "admit": ADMIT_FACTOR * total + ADMIT_ROW_SECONDS * rows}


def plan_seconds(plan: Plan) -> list[dict[str, float]]:
    """Each stage's :func:`stage_seconds` in the plan's order, in one fresh process (the first stage imports
    transformers and starts the profiler)."""
    return [stage_seconds(plan, case, first_import=i == 0, first_profile=i == 0) for i, case in enumerate(plan.cases)]
