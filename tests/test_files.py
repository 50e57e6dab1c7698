"""Result files: atomic writes whose failure is one error, and output paths checked before any work."""

from __future__ import annotations

import os

import pytest

from poptune import ConfigError
from poptune.files import check_writable_file, check_writable_folder, write_text
from tests.hostile import assert_intact, hostile_paths


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


# Issue 49: only regular files are written; a device, a FIFO, a folder or a link to nothing is refused, and a
# name at the study-name limit still fits its temporary file.


@pytest.mark.parametrize("kind", ["fifo", "null", "full", "dangling", "folder"])
def test_a_target_that_is_not_a_regular_file_is_refused_and_left_as_it_was(guard_renames, kind):
    paths = hostile_paths(guard_renames / "hostile")
    with pytest.raises(ConfigError, match="not a regular file|is a directory|link to a missing file"):
        check_writable_file(paths[kind])
    with pytest.raises(ConfigError, match="not a regular file|is a directory|link to a missing file"):
        write_text(paths[kind], "{}")
    assert_intact(paths)
    assert sorted(p.name for p in paths["fifo"].parent.iterdir()) == sorted(p.name for p in paths.values())


def test_a_link_to_a_regular_file_writes_the_file_and_keeps_the_link(tmp_path):
    (tmp_path / "real.json").write_text("old\n")
    (tmp_path / "link.json").symlink_to("real.json")
    write_text(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_name_at_the_length_limit_is_written_with_its_temporary_file(tmp_path):
    from poptune.store.urls import _NAME_AFFIXES, _NAME_MAX

    name = "x" * (_NAME_MAX - _NAME_AFFIXES)  # the longest study name the check lets through
    for target in (f"study-methods-{name}.csv", f"{name}.pareto.png", f"tuner-{name}.md"):
        if len(target.encode()) <= _NAME_MAX:
            write_text(tmp_path / target, "ok")
            assert (tmp_path / target).read_text() == "ok\n"
    assert all(len(p.name) <= _NAME_MAX for p in tmp_path.iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_figure_at_the_length_limit_is_written(tmp_path):
    from poptune.plots import pyplot, save_figure
    from poptune.store.urls import _NAME_AFFIXES, _NAME_MAX

    name = "x" * (_NAME_MAX - _NAME_AFFIXES)
    fig = pyplot().figure()
    save_figure(fig, tmp_path / f"{name}.pareto.png")  # the study report's plot: its temporary name was longer
    assert (tmp_path / f"{name}.pareto.png").read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir()] == [f"{name}.pareto.png"]
