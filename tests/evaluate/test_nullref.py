"""The prompts workload's null reference: the full model's answers in another batch composition, scored like a
configuration's; measured once per study, stored beside the prompts record and reported beside POP's rows."""

from __future__ import annotations

import json
import re

import pytest

import poptune.evaluate.answers as answers
from poptune.cli import main
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.evaluate.answers import ITEMS_KEY, full_answers, score_prompts
from poptune.evaluate.changed import changed_interval
from poptune.evaluate.nullref import null_batch, null_reference


def _write(tmp_path, rows):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_null_answers_each_prompt_alone_and_is_scored_like_a_configuration(tmp_path, shared, monkeypatch):
    model, tokenizer = shared("tiny-llama")
    full_answers(model).clear()
    path = _write(tmp_path, [{"prompt": f"Request {i}: {'tell me ' * (i + 1)}about the sea.", "max_tokens": 5}
                             for i in range(5)])
    full = score_prompts(model, tokenizer, PopConfig(skip=0), str(path), [0, 1, 2, 3, 4], batch_size=4)
    kept = dict(full_answers(model))
    batches: list[int] = []
    generate = answers._generate

    def counted(model_, tokenizer_, prompts, limits, chunk, **kwargs):
        batches.append(len(prompts))
        return generate(model_, tokenizer_, prompts, limits, chunk, **kwargs)

    monkeypatch.setattr(answers, "_generate", counted)
    null = null_reference(model, tokenizer, str(path), full.details[ITEMS_KEY], batch_size=4)
    assert batches == [1] * 5  # each prompt alone: no padding, other shapes than the batches of 4
    assert full_answers(model) == kept  # the reference's answers are not replaced by the perturbed ones
    assert null["batch_size"] == 1 and "batch 1" in null["perturbation"]
    assert null["items"] == 5 and 0 <= null["changed"] <= 5 and 0 <= null["agreement"] <= 1
    drop = null["prob_drop"]
    assert drop["lo"] <= drop["mean"] <= drop["hi"] and drop["items"] == {"prompt_likelihood": 5}
    assert null["full_prob"] == pytest.approx(sum(r["prob"] for r in full.details[ITEMS_KEY].values()) / 5)
    assert "sea" not in json.dumps(null)


def test_a_reference_run_one_at_a_time_gets_a_null_in_pairs():
    assert null_batch(8) == 1 and null_batch(2) == 1 and null_batch(1) == 2


def test_the_null_needs_the_full_answers_kept(tmp_path, shared):
    model, tokenizer = shared("tiny-llama")
    path = _write(tmp_path, [{"prompt": "A prompt never answered before, 7391.", "max_tokens": 3}])
    with pytest.raises(ConfigError, match="full model's answers kept"):
        null_reference(model, tokenizer, str(path), {0: {"unchanged": 1.0, "prob": 0.5}}, batch_size=8)
    with pytest.raises(ConfigError, match="at least one prompt"):
        null_reference(model, tokenizer, str(path), {}, batch_size=8)


def test_the_null_line_reads_like_a_front_row_with_its_exact_interval():
    from poptune.reports.prompts_lines import null_line

    line = null_line({"perturbation": "each prompt alone", "items": 17, "changed": 2, "agreement": 0.93,
                      "median_divergence": 11, "prob_drop": {"mean": 0.12, "lo": -3.0, "hi": 3.4}})
    ci = changed_interval(2, 17)  # measured once: one look
    assert f"unchanged 15/17 = 88.2% [{100 * (1 - ci.hi):.1f}, {100 * (1 - ci.lo):.1f}]" in line
    assert f"changed at most {100 * changed_interval(2, 17, one_sided=True).hi:.1f}% at 95%" in line
    assert "each prompt alone" in line and "probability drop +0.12 [-3.00, +3.40] pts" in line


def test_a_study_measures_the_null_once_stores_it_and_reports_it_beside_pops_rows(tmp_path, capsys):
    """A study judged on likelihood: the null is stored next to the prompts record (on the search's items) and
    its line comes before the rows; the full model's own row drops by exactly 0."""
    import optuna

    from poptune.evaluate.prompts import LIKELIHOOD
    from poptune.store import StoredStudy
    from poptune.store.trials import StoredTrial

    path = _write(tmp_path, [{"prompt": f"Item {i}: the colour of the sky is", "max_tokens": 3} for i in range(8)])
    storage = f"sqlite:///{tmp_path / 's.db'}"
    argv = ["study", "--model", "tiny-llama", "--prompts", str(path), "--judge", "likelihood", "--trials", "2",
            "--items", "2", "--no-confirm", "--repeats", "1", "--max-pairs", "3", "--precision", "0",
            "--max-drop", "100", "--storage", storage]
    assert main(argv) == 0
    out = capsys.readouterr().out
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
    stored = StoredStudy.of(study)
    assert tuple(stored.problem["tasks"]) == (LIKELIHOOD,)
    null = stored.prompts_null
    assert null is not None and null["items"] == stored.problem["limit"] == 4  # 8 prompts halved: 4 searched
    assert "accuracy = mean probability of the full answer's tokens" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("prompts: "))
    assert lines[header + 1].startswith("  null reference (the full model again: each prompt alone")
    kept, n = re.search(r"unchanged (\d+)/(\d+)", lines[header + 1]).groups()
    assert int(n) == 4 and int(n) - int(kept) == null["changed"]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    full = next(t for t in done if StoredTrial.of(t).config.skip == 0)
    assert full.user_attrs["drop"]["mean"] == 0.0 and full.user_attrs["drop"]["method"] == "identical"
    assert "sky" not in out
