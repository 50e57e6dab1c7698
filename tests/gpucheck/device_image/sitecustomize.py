"""Holds a Python process to the GPU machine's package set: put this folder first on PYTHONPATH.

Every third-party package installed here whose distribution is not on the list named by
``POPTUNE_DEVICE_PACKAGES`` (one name a line, ``#`` comments) becomes absent for the repository's own code, as
on the device. (Imports made by a listed package's own code pass: they are its dependencies, which the
device's version of it has there; the versions installed here may need others.) Importing one raises
``ModuleNotFoundError`` and is appended to ``POPTUNE_DEVICE_BLOCKED`` as ``import <top-level module>
<importing module>``; ``importlib.util.find_spec`` (how libraries probe optional packages) answers None and is
logged as ``probe <module>``. The standard library, the repository's own packages and modules not installed
here at all are left to Python. ``POPTUNE_DEVICE_BLOCKED`` gets one ``active <pid>`` line per process, so a
test can tell the guard ran.

Standard library only: it runs before anything else of the process.
"""

from __future__ import annotations

import os
import re
import sys

_LOCAL = {"poptune", "tests", "benchmarks", "conftest"}
_OURS = _LOCAL | {"__main__"}  # the code held to the list


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class DeviceImage:
    """A meta path finder refusing modules of distributions outside the allowed set."""

    def __init__(self, allowed: set[str], log: str) -> None:
        self.allowed, self.log = allowed, log
        self.decided: dict[str, bool] = {}
        self.owners: dict[str, list[str]] | None = None
        self.busy = False

    def _owners(self, top: str) -> list[str]:
        if self.owners is None:
            from importlib import metadata

            self.owners = metadata.packages_distributions()
        return self.owners.get(top, [])

    def blocked(self, name: str) -> bool:
        """Whether ``name``'s top-level package is installed here but absent from the device."""
        top = name.partition(".")[0]
        if self.busy:
            return False
        if top not in self.decided:
            self.busy = True
            try:
                self.decided[top] = self._blocked(top)
            finally:
                self.busy = False
        return self.decided[top]

    def _blocked(self, top: str) -> bool:
        if top in sys.stdlib_module_names or top in sys.builtin_module_names or top in _LOCAL:
            return False
        owners = self._owners(top)
        return bool(owners) and not any(_norm(d) in self.allowed for d in owners)

    def note(self, line: str) -> None:
        with open(self.log, "a") as f:
            f.write(line + "\n")

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if not self.blocked(name):
            return None
        importer = _importer()
        if importer.partition(".")[0] not in _OURS:
            return None  # a listed package's own dependency
        self.note(f"import {name.partition('.')[0]} {importer}")
        raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU machine's image)", name=name)


def _importer() -> str:
    """The module whose code asked for the import: the first frame outside importlib and this file."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen"))
                                 or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


def _install() -> None:
    listing, log = os.environ.get("POPTUNE_DEVICE_PACKAGES"), os.environ.get("POPTUNE_DEVICE_BLOCKED")
    if not listing or not log:
        return
    with open(listing) as f:
        allowed = {_norm(line.strip()) for line in f if line.strip() and not line.startswith("#")}
    with open(log, "a") as f:
        f.write(f"active {os.getpid()}\n")
    guard = DeviceImage(allowed, log)
    sys.meta_path.insert(0, guard)
    import importlib.util

    probe = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        if not name.startswith(".") and guard.blocked(name) and _importer().partition(".")[0] in _OURS:
            guard.note(f"probe {name}")
            return None
        return probe(name, package)

    importlib.util.find_spec = find_spec


_install()
