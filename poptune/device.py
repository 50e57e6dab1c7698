"""Device and dtype arguments, checked once for every command and API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poptune.errors import ConfigError, DeviceError

if TYPE_CHECKING:
    import torch

__all__ = ["resolve_device", "resolve_dtype", "dtype_name", "dtype_of", "native_bf16", "DTYPES"]

DTYPES = ("float32", "bfloat16", "float16")


def resolve_device(device: "str | torch.device") -> "torch.device":
    """Parses and checks a CPU or CUDA device, giving CUDA an explicit index.

    Raises:
        ConfigError: The device is malformed or neither CPU nor CUDA.
        DeviceError: CUDA was asked for but is not available, or the index does not exist.
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"`device` must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from e
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ConfigError(f"`device` must be 'cpu', 'cuda' or 'cuda:N', got {str(dev)!r}")
    if not torch.cuda.is_available():
        raise DeviceError("CUDA was requested but is not available on this machine")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= torch.cuda.device_count():
        raise DeviceError(f"cuda:{index} was requested but this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (Intel AMX tiles): there a bfloat16 model's
    products run several times faster than float32's, elsewhere bfloat16 is converted in software and slower."""
    import torch

    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)  # torch's own check, as its oneDNN dispatch reads it
    return probe is not None and bool(probe())


def dtype_name(dtype: str | None, device: str) -> str:
    """The name of the dtype ``dtype`` means on ``device`` (a name, or None: the device's native precision, as
    :func:`resolve_dtype` reads it), without touching the device: what a stored study records."""
    if dtype is not None:
        return dtype
    return "bfloat16" if device.startswith("cuda") or native_bf16() else "float32"


def resolve_dtype(dtype: "str | torch.dtype | None", device: "torch.device") -> "torch.dtype":
    """``None`` means the device's native fast precision, as the model would be deployed there: bfloat16 on CUDA and
    on a CPU that multiplies bfloat16 in hardware (:func:`native_bf16`), float32 on other CPUs."""
    import torch

    if dtype is None:
        return getattr(torch, dtype_name(None, device.type))
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {name: getattr(torch, name) for name in DTYPES}
    if dtype not in names:
        raise ConfigError(f"`dtype` must be one of {', '.join(names)}, got {dtype!r}")
    return names[dtype]


def dtype_of(model: Any) -> str:
    """The name of the dtype ``model``'s weights are held in (``bfloat16``): what records and keys say it ran in."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")
