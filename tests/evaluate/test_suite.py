"""One evaluation: task selection, fixed subsets, the full model beside the configuration."""

import json

import pytest

from poptune import ConfigError, PopConfig, get_pop_config, load_model
from poptune.cli import main
from poptune.evaluate.fidelity import FidelitySpec
from poptune.evaluate.suite import EMBEDDED, EvalSpec, item_indices, resolve_tasks, run_eval
from poptune.evaluate.taskpack import SHORT_TASKS


def test_item_indices_are_evenly_spaced_and_fixed():
    assert item_indices(10, 5) == [0, 2, 4, 6, 8]
    assert item_indices(1838, 100) == item_indices(1838, 100)
    assert len(item_indices(1838, 100)) == 100 and item_indices(1838, 100)[-1] > 1800
    assert item_indices(3, 10) == [0, 1, 2] and item_indices(4, None) == [0, 1, 2, 3]


def test_resolve_tasks(tmp_path):
    assert resolve_tasks(None, None) == EMBEDDED
    assert resolve_tasks(None, tmp_path) == SHORT_TASKS
    assert resolve_tasks("piqa,embedded", tmp_path) == ("piqa", *EMBEDDED)
    with pytest.raises(ConfigError, match="unknown task"):
        resolve_tasks("piqa,mmlu", tmp_path)
    with pytest.raises(ConfigError, match="need a data directory"):
        resolve_tasks("piqa", None)


def test_run_eval_on_real_items(eval_data):
    model, tok = load_model("tiny-llama")
    spec = EvalSpec(tasks=("piqa", "boolq"), data_dir=eval_data, limit=6, batch_size=4,
                    fidelity=FidelitySpec(context_tokens=32, continuation_tokens=4, pairs=2))
    result = run_eval(model, tok, PopConfig(skip=1), spec)
    assert result.items == {"piqa": 6, "boolq": 6}
    # skip=1 is exact: the same accuracy as the full model, and full fidelity
    assert result.accuracy("pop") == result.accuracy("full")
    assert result.drop == pytest.approx(0.0)
    assert result.fidelity.top1_agreement == 1.0
    assert get_pop_config(model) is None
    data = result.to_dict()
    assert set(data["scores"]["piqa"]["full"]) == {"acc", "acc_norm"}
    assert "mean" in result.table()


def test_eval_command_writes_json(eval_data, tmp_path, capsys):
    path = tmp_path / "eval.json"
    code = main(["eval", "--model", "tiny-llama", "--skip", "3", "--tasks", "winogrande", "--limit", "4",
                 "--data-dir", str(eval_data), "--fidelity-pairs", "0", "--out", str(path)])
    out = capsys.readouterr().out
    assert code == 0 and "winogrande" in out
    data = json.loads(path.read_text())
    assert data["items"] == {"winogrande": 4} and data["config"]["skip"] == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tasks", "mmlu"], "unknown task"),
        (["--tasks", "piqa", "--data-dir", "/nonexistent/data"], "does not exist"),
        (["--limit", "0"], "`limit` must be a positive integer"),
    ],
)
def test_eval_user_errors(capsys, argv, message):
    code = main(["eval", "--model", "tiny-llama", "--skip", "1", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_each_item_gets_its_own_outcome_whatever_the_order_its_items_come_in(eval_data):
    """lm-eval yields a task's chosen documents in the dataset's order but names them by the order of the ``samples``
    it was given: items asked in another order (a study's shuffled order) came back with each other's outcomes.
    Each item scored in a shuffled call must get the figure it gets alone (bits per byte: a figure of its own)."""
    from poptune.evaluate.suite import measure_tasks

    model, tok = load_model("tiny-llama")
    spec = EvalSpec(tasks=("longctx_squad_bpb",), data_dir=eval_data, batch_size=4, fidelity=None)
    shuffled = measure_tasks(model, tok, PopConfig(skip=0), spec.with_samples({"longctx_squad_bpb": [2, 0, 1]}))
    alone = {i: measure_tasks(model, tok, PopConfig(skip=0), spec.with_samples({"longctx_squad_bpb": [i]}))
             .outcomes["longctx_squad_bpb"][0] for i in (0, 1, 2)}
    assert shuffled.items["longctx_squad_bpb"] == [2, 0, 1]
    assert min(abs(a - b) for a, b in [(alone[0], alone[1]), (alone[0], alone[2]), (alone[1], alone[2])]) > 1e-3
    assert shuffled.outcomes["longctx_squad_bpb"] == pytest.approx([alone[2], alone[0], alone[1]], rel=1e-5)
