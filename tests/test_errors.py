"""The one error hierarchy: every user error is a PoptuneError, one line and exit code 2 at the CLI."""

from __future__ import annotations

import pytest

import poptune.cli.importance
from poptune import errors
from poptune.cli import main


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_is_a_poptune_error(name):
    assert issubclass(getattr(errors, name), errors.PoptuneError)


def test_a_measurement_error_is_not_a_configuration_error():
    assert not issubclass(errors.MeasurementError, errors.ConfigError)
    assert issubclass(errors.MeasurementError, RuntimeError)


@pytest.mark.parametrize("error", [errors.MeasurementError, errors.ConfigError, errors.StorageError])
def test_the_cli_reports_any_poptune_error_in_one_line_with_exit_2(monkeypatch, capsys, error):
    def fails(args):
        raise error("the measurement of skip 3 is not finite (nan)")

    monkeypatch.setattr(poptune.cli.importance, "run", fails)
    assert main(["importance", "--model", "tiny-llama"]) == 2
    err = capsys.readouterr().err
    assert err == "poptune importance: error: the measurement of skip 3 is not finite (nan)\n"
