"""Per-item scores of the ``longctx_*`` tasks (the YAMLs' ``process_results`` hooks), built on lm-eval's code.

- SQuAD and CoQA: exact match and token F1 of the answer against every accepted answer, the best one counted,
  with the official SQuAD v1.1 normalisation (lower case, no punctuation, no articles, single spaces):
  lm-eval's ``qasper.metrics.normalize_answer`` and ``f1_abstractive`` (both copied there from the SQuAD script)
  and ``metric_max_over_ground_truths``. The answer is the generation's first line, as lm-eval's CoQA task
  takes it. (lm-eval's own CoQA and SQuAD v2 helpers need ``transformers.data.metrics`` and the ``evaluate``
  package, neither available with transformers 5.)
- DROP: lm-eval's ``drop.utils.process_results`` itself (bags of spans, numbers normalised, best alternative);
  the YAML names it directly.
- GSM8K: lm-eval's regex filter and ``exact_match`` metric, configured in the YAML.
- Bits per byte of the gold continuation: ``-loglikelihood / ln 2 / utf-8 bytes of the continuation``.

Every hook returns plain floats per document, so lm-eval's per-sample logs (``log_samples=True``) carry each
item's metric values next to its ``doc_id``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["bits_per_byte", "bpb_results", "first_line", "squad_em_f1", "squad_results"]


def first_line(generation: str) -> str:
    """The answer a generation gives: its first line after stripping, as lm-eval's CoQA task reads it."""
    return generation.strip().split("\n")[0]


def squad_em_f1(prediction: str, answers: Sequence[str]) -> dict[str, float]:
    """SQuAD exact match and token F1 of ``prediction``, the best over ``answers``.

    Example:
        >>> squad_em_f1("The Eiffel tower!", ["Eiffel Tower", "the tower"])
        {'em': 1.0, 'f1': 1.0}
    """
    from lm_eval.api.metrics import metric_max_over_ground_truths
    from lm_eval.tasks.qasper.metrics import f1_abstractive, normalize_answer

    def exact(pred: str, gold: str) -> float:
        return float(normalize_answer(pred) == normalize_answer(gold))

    def f1(pred: str, gold: str) -> float:
        return float(f1_abstractive([pred], [gold]))

    return {
        "em": metric_max_over_ground_truths(exact, prediction, answers),
        "f1": metric_max_over_ground_truths(f1, prediction, answers),
    }


def squad_results(doc: Mapping[str, Any], results: Sequence[str]) -> dict[str, float]:
    """``process_results`` of longctx_squad and longctx_coqa: ``{"em", "f1"}`` of the first generated line."""
    return squad_em_f1(first_line(results[0]), doc["answers"])


def bits_per_byte(loglikelihood: float, continuation: str) -> float:
    """``-loglikelihood / ln 2 / len(continuation.encode("utf-8"))``: the continuation's cost in bits per byte."""
    return -loglikelihood / math.log(2) / len(continuation.encode("utf-8"))


def bpb_results(doc: Mapping[str, Any], results: Sequence[tuple[float, bool]]) -> dict[str, float]:
    """``process_results`` of the ``*_bpb`` tasks: ``{"bpb"}`` of the gold continuation (lower is better)."""
    loglikelihood, _is_greedy = results[0]
    return {"bpb": bits_per_byte(loglikelihood, doc["continuation"])}
