"""Result files: atomic writes whose failure is one error, and output paths checked before any work."""

from __future__ import annotations

import os

import pytest

from poptune import ConfigError
from poptune.files import check_writable_file, check_writable_folder, write_text


def test_write_text_into_a_read_only_folder_is_one_error(read_only_dir):
    with pytest.raises(ConfigError, match="cannot write .*out.json") as exc:
        write_text(read_only_dir / "out.json", "{}")
    assert exc.value.__context__ is None or isinstance(exc.value.__context__, OSError)
    assert list(read_only_dir.iterdir()) == []


def test_the_failed_cleanup_does_not_replace_the_write_error(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr("pathlib.Path.unlink", refuse)
    with pytest.raises(ConfigError, match="cannot write .*: Permission denied"):
        write_text(tmp_path / "out.json", "{}")


def test_output_paths_are_checked_up_front(tmp_path, read_only_dir):
    check_writable_file(tmp_path / "fine.json")
    check_writable_folder(tmp_path)
    assert list(tmp_path.iterdir()) == [read_only_dir]  # the probe is gone
    with pytest.raises(ConfigError, match="cannot write in"):
        check_writable_file(read_only_dir / "b.json")
    with pytest.raises(ConfigError, match="cannot write in"):
        check_writable_folder(read_only_dir)
    with pytest.raises(ConfigError, match="does not exist"):
        check_writable_file(tmp_path / "missing" / "b.json")
    with pytest.raises(ConfigError, match="is a directory"):
        check_writable_file(tmp_path)
