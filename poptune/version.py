"""poptune's installed version: the package metadata, read when asked (the CLI's ``--version``, provenance)."""

from __future__ import annotations

__all__ = ["installed_version"]


def installed_version() -> str:
    """The installed poptune distribution's version, or ``unknown`` where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("poptune")
    except PackageNotFoundError:
        return "unknown"
