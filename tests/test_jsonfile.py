"""The one bounded reader of a user's JSON (issue 87, point 4): integers, depth and duplicate keys refused in one
line, never a traceback."""

from __future__ import annotations

import pytest

from poptune.errors import ConfigError, DataError
from poptune.jsonfile import MAX_DEPTH, MAX_DIGITS, loads


def test_plain_json_reads_as_json_does():
    assert loads('{"a": [1, 2.5, -3, "x", null, true, {"b": {}}]}', "f") == {"a": [1, 2.5, -3, "x", None, True,
                                                                                  {"b": {}}]}
    assert loads("-" + "9" * MAX_DIGITS, "f") == -int("9" * MAX_DIGITS)


@pytest.mark.parametrize("text, message", [
    ('{"seed": ' + "1" * 5000 + "}", "an integer of 5000 digits"),
    ("[" + "-" + "1" * (MAX_DIGITS + 1) + "]", f"an integer of {MAX_DIGITS + 1} digits"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested too deeply"),
    ('{"a": 1, "a": 2}', "the key 'a' given twice"),
    ('{"x": {"weights_fingerprint": "a", "weights_fingerprint": null}}', "given twice"),
    ('{"a": ', "is not JSON"),
])
def test_what_would_be_a_traceback_or_a_surprise_is_one_line(text, message):
    with pytest.raises(ConfigError) as e:
        loads(text, "file x.json")
    assert message in str(e.value) and str(e.value).startswith("file x.json") and "\n" not in str(e.value)


def test_the_caller_names_the_error_class():
    with pytest.raises(DataError):
        loads("[" * 2000 + "]" * 2000, "importance file x", DataError)
