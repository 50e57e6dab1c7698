"""One exception hierarchy for every user error.

The CLI turns any :class:`PoptuneError` into one line on stderr and exit code 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

__all__ = [
    "PoptuneError",
    "ConfigError",
    "ModelNotFoundError",
    "UnsupportedModelError",
    "InputError",
    "DeviceError",
    "DataError",
    "MeasurementError",
    "StorageError",
]


class PoptuneError(Exception):
    """Base class of every error poptune reports to a user as one line."""


class ConfigError(PoptuneError, ValueError):
    """A configuration value is out of range or malformed."""


class ModelNotFoundError(PoptuneError, LookupError):
    """A model name, hub id or directory could not be resolved."""


class UnsupportedModelError(PoptuneError, TypeError):
    """The model's architecture is not one the POP engine knows how to run."""


class InputError(PoptuneError, ValueError):
    """Inputs the POP engine cannot run as given (e.g. a right-padded prompt, or images fed in chunks)."""


class DeviceError(PoptuneError, RuntimeError):
    """A device was asked for that this machine does not have (e.g. CUDA without a GPU)."""


class DataError(PoptuneError, FileNotFoundError):
    """An evaluation data file is missing or not in the expected format."""


class MeasurementError(PoptuneError, RuntimeError):
    """A measurement came out unusable (NaN or inf, or a check it relies on failed).

    A study fails that trial only and stores nothing of it as a result; elsewhere it is a one-line user error
    like any other. It is not a :class:`ConfigError`: the configuration was valid, the run was not.
    """


class StorageError(PoptuneError, OSError):
    """The study's storage failed in a way waiting cannot cure (a full disk, a read-only or corrupt file)."""
