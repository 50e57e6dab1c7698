"""The options table (:mod:`poptune.cli._options`): a shared option is declared once, every comma-separated
option has the one type, ``--kv`` has one meaning, and every default that the library has is the library's."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from poptune.cli import build_parser, main
from poptune.cli._options import OPTIONS, LibraryDefault, comma_list, resolve_defaults

#: Every comma-separated option, by command: each must parse with :func:`comma_list`.
COMMA_OPTIONS = {
    "bench": {"--lengths", "--image", "--kv"},
    "eval": {"--tasks", "--kv"},
    "generate": {"--kv"},
    "study": {"--lengths", "--image", "--tasks", "--kv", "--objectives", "--gpus", "--enqueue", "--baselines",
              "--baseline-ratios"},
    "grid": {"--lengths", "--image", "--tasks", "--kv"},
    "baseline": {"--lengths", "--image", "--tasks", "--kv"},
    "compare": {"--tasks", "--pop", "--methods", "--ratios", "--profiles"},
    "tuners": {"--tasks", "--lengths", "--samplers"},
}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def _definition(action: argparse.Action) -> tuple:
    return (tuple(action.option_strings), action.dest, action.type, action.choices, action.metavar, action.help)


def test_a_shared_option_is_declared_once():
    commands = _commands()
    for flag in ("--data-dir", "--kv"):
        users = {name: _options(p)[flag] for name, p in commands.items() if flag in _options(p)}
        assert len(users) >= 4, f"{flag} taken by {sorted(users)} only"
        assert len({_definition(a) for a in users.values()}) == 1, f"{flag} is declared differently: {sorted(users)}"
        expected = OPTIONS[flag]
        for action in users.values():
            assert action.option_strings == list(expected.flags) and action.help == expected.spec["help"]
    model_commands = [p for p in commands.values() if "--weights" in _options(p)]  # the model group (add_model)
    for flag in ("--model", "--device", "--dtype", "--weights"):
        assert len({_definition(_options(p)[flag]) for p in model_commands}) == 1, flag


def test_every_comma_separated_option_has_the_one_type():
    commands = _commands()
    for name, parser in commands.items():
        for flag, action in _options(parser).items():
            said = f"{action.help or ''} {action.metavar or ''}"
            listed = flag in COMMA_OPTIONS.get(name, ()) or "comma-separated" in said or "," in str(action.metavar)
            if listed:
                assert action.type is comma_list, f"poptune {name} {flag}: comma-separated without comma_list"
    for name, flags in COMMA_OPTIONS.items():
        assert flags <= set(_options(commands[name])), f"poptune {name} lost {flags - set(_options(commands[name]))}"
    assert comma_list(" a, b,,c ") == ("a", "b", "c") and comma_list("") == () and comma_list(" , ") == ()


def test_kv_has_one_meaning_and_one_clear_refusal(capsys):
    for argv in (["bench", "--skip", "1"], ["study"]):
        args = resolve_defaults(build_parser().parse_args(argv))
        assert args.kv in ("own", ("own",)), args.kv  # the library's default, one source
    base = ["generate", "--model", "tiny-llama", "--skip", "1", "--prompt", "hi"]
    for value, said in (("bogus", "must be one of own, calibrated, anchor, got 'bogus'"),
                        ("own,calibrated", "`--kv` of one configuration names one K/V source"),
                        ("", "`--kv` of one configuration names one K/V source")):
        assert main([*base, "--kv", value]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err


def _library() -> dict[tuple[str, str], object]:
    """(command, option's dest) -> the library's default, read from the library itself."""
    from poptune.baselines.importance import ImportanceSpec
    from poptune.comparison.measure import PROFILES
    from poptune.engine import PopConfig
    from poptune.evaluate.suite import EvalSpec
    from poptune.measure.benchrecord import DEFAULT_POLICY, BenchSpec
    from poptune.problem.problem import TuningProblem
    from poptune.tune.gridstudy import GridSpec

    problem, bench, imp = TuningProblem(), BenchSpec(), ImportanceSpec()
    expected: dict[tuple[str, str], object] = {}
    for command in ("bench", "eval", "generate", "study", "grid", "baseline", "compare"):
        expected |= {(command, "model"): problem.model, (command, "device"): problem.device,
                     (command, "weights"): problem.weights}
    for command in ("bench", "eval", "generate"):
        expected |= {(command, "boundary"): PopConfig(1).boundary, (command, "offset"): PopConfig(1).offset}
    for command in ("study", "grid", "baseline"):
        expected |= {(command, "seed"): problem.seed, (command, "repeats"): problem.repeats,
                     (command, "precision"): problem.precision, (command, "max_drop"): problem.max_drop}
    expected |= {("study", "objectives"): problem.objectives,
                 ("bench", "batch_size"): bench.batch_size, ("bench", "decode_tokens"): bench.decode_tokens,
                 ("bench", "energy_seconds"): bench.energy_seconds, ("bench", "repeats"): DEFAULT_POLICY.min_repeats,
                 ("bench", "max_pairs"): DEFAULT_POLICY.max_repeats, ("bench", "precision"): DEFAULT_POLICY.precision,
                 ("bench", "max_seconds"): DEFAULT_POLICY.max_seconds, ("bench", "order"): DEFAULT_POLICY.order,
                 ("bench", "min_seconds"): DEFAULT_POLICY.min_seconds,
                 ("eval", "batch_size"): EvalSpec(tasks=("passkey",)).batch_size,
                 ("eval", "fidelity_pairs"): EvalSpec(tasks=("passkey",)).fidelity.pairs,
                 ("importance", "samples"): imp.samples, ("importance", "length"): imp.prompt_tokens,
                 ("importance", "new_tokens"): imp.new_tokens, ("importance", "batch_size"): imp.batch_size,
                 ("importance", "seed"): imp.seed, ("grid", "out"): GridSpec(problem=problem).out,
                 ("grid", "batch"): GridSpec(problem=problem).batch,
                 ("compare", "profiles"): PROFILES}
    return expected


def test_every_default_the_library_has_is_the_librarys():
    required = {"bench": ["--skip", "1"], "eval": ["--skip", "1"], "baseline": ["--method", "shortgpt"],
                "compare": ["--tasks", "passkey", "--workload", "w", "--out", "o.json"]}
    parsed = {}
    for (command, dest), value in _library().items():
        if command not in parsed:
            parsed[command] = resolve_defaults(build_parser().parse_args([command, *required.get(command, [])]))
        assert getattr(parsed[command], dest) == value, f"poptune {command}: {dest}"
    # bench's prompt lengths (None: not given) show the library's in their help
    lengths = _options(_commands()["bench"])["--lengths"]
    assert lengths.default is None and lengths.library_default.value() == (128, 512, 2048)


def test_the_library_is_read_when_a_command_runs_not_when_the_parser_is_built():
    code = ("import sys; from poptune.cli import build_parser; build_parser(); "
            "assert 'torch' not in sys.modules, 'building the parser imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)
    default = LibraryDefault("poptune.comparison.measure:compare.pairs")
    assert default.value() == 6 and str(default) == "6" and "compare.pairs" in repr(default)


def test_a_cross_field_refusal_is_the_specs(capsys, tmp_path):
    """--grid with --storage is TunerSpec's refusal; --store-prompts without --prompts is TuningProblem's."""
    from poptune.errors import ConfigError
    from poptune.problem.problem import TuningProblem

    assert main(["tuners", "--grid", str(tmp_path / "g.csv"), "--storage", "sqlite:///x.db"]) == 2
    err = capsys.readouterr().err
    assert "not both" in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="`--store-prompts` goes with `--prompts FILE`"):
        TuningProblem(store_prompts=True)
