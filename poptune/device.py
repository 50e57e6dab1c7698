"""Device and dtype arguments, checked once for every command and API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from poptune.errors import ConfigError, DeviceError

if TYPE_CHECKING:
    import torch

__all__ = ["resolve_device", "resolve_dtype", "DTYPES"]

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


def resolve_dtype(dtype: "str | torch.dtype | None", device: "torch.device") -> "torch.dtype":
    """``None`` means float32 on CPU and bfloat16 on CUDA."""
    import torch

    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {name: getattr(torch, name) for name in DTYPES}
    if dtype not in names:
        raise ConfigError(f"`dtype` must be one of {', '.join(names)}, got {dtype!r}")
    return names[dtype]
