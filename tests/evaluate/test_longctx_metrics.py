"""Per-item scores of the long-prompt tasks on hand-made answers with known exact match, F1 and bits per byte."""

import math

import pytest

from poptune.evaluate.tasks.longctx_metrics import bits_per_byte, bpb_results, first_line, squad_em_f1, squad_results


@pytest.mark.parametrize(
    ("prediction", "answers", "em", "f1"),
    [
        ("Denver Broncos", ["Denver Broncos", "The Denver Broncos"], 1.0, 1.0),
        # Normalisation: case, punctuation and articles do not count.
        ("The  DENVER broncos!", ["Denver Broncos"], 1.0, 1.0),
        # Token F1: 1 shared token of 1 predicted and 2 gold: P=1, R=1/2, F1=2/3.
        ("the Broncos", ["Denver Broncos"], 0.0, 2 / 3),
        # Best answer counted: 2 shared of 3 predicted and 2 gold (F1 0.8) beats no overlap.
        ("Denver Broncos won", ["Carolina Panthers", "Denver Broncos"], 0.0, 0.8),
        ("Santa Clara", ["Levi's Stadium", "Santa Clara, California", "Santa Clara"], 1.0, 1.0),
        ("", ["Denver"], 0.0, 0.0),
    ],
)
def test_squad_exact_match_and_f1(prediction, answers, em, f1):
    assert squad_em_f1(prediction, answers) == {"em": em, "f1": pytest.approx(f1)}


def test_squad_results_score_the_first_generated_line():
    doc = {"answers": ["Lady Gaga"]}
    assert squad_results(doc, [" Lady Gaga\nQuestion: Who sang?"]) == {"em": 1.0, "f1": 1.0}
    assert first_line("\n  Lady Gaga.  \nTitle: x") == "Lady Gaga.  "


def test_coqa_answers_from_every_annotator():
    doc = {"answers": ["No.", "no", "no", "no"]}
    assert squad_results(doc, [" no"]) == {"em": 1.0, "f1": 1.0}
    # "no it was sad" against "no": 1 of 4 predicted tokens, all of the gold: P=1/4, R=1, F1=0.4.
    assert squad_results(doc, [" No, it was sad."]) == {"em": 0.0, "f1": pytest.approx(0.4)}


@pytest.mark.parametrize(
    ("generation", "answers", "em", "f1"),
    [
        (" 45 to 64", [["45 to 64"]], 1.0, 1.0),
        # Numbers are normalised ("2" and "2.0" are the same number).
        (" 2.0", [["2"]], 1.0, 1.0),
        # A wrong number gets no credit for the words around it.
        (" 13 yards", [["12 yards"]], 0.0, 0.0),
        # Bag of spans: one of two gold spans found scores F1 (1 + 0) / 2.
        (" Spain", [["Spain", "Italy"]], 0.0, 0.5),
        # The best alternative counts.
        (" Spain", [["Spain", "Italy"], ["Spain"]], 1.0, 1.0),
    ],
)
def test_drop_bag_of_spans(generation, answers, em, f1):
    from lm_eval.tasks.drop.utils import process_results  # what longctx_drop.yaml names

    assert process_results({"answers": answers}, [generation]) == {"em": em, "f1": pytest.approx(f1)}


def test_bits_per_byte_counts_utf8_bytes():
    # 10 bits of surprise over " héllo": 7 bytes in UTF-8 (é is two), 6 characters.
    assert bits_per_byte(-10 * math.log(2), " héllo") == pytest.approx(10 / 7)
    assert bpb_results({"continuation": " ab"}, [(-3 * math.log(2), False)]) == {"bpb": pytest.approx(1.0)}
    assert bits_per_byte(0.0, "x") == 0.0
