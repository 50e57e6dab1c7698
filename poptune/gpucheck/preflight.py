"""Preflight: package versions, CUDA present, NVML matched to the torch device by UUID, the energy counter
advancing during a 1-second matmul, clocks readable.

A version or CUDA failure stops the check (nothing could be measured right); an NVML failure does not (a
counter NotSupported in a VM, a UUID that does not match): timing goes on and the figures NVML would give are
empty, the FAIL line saying so (:attr:`Check.stops`).

The version lines need no import of the packages they check (package metadata only), so they run, and say
what is missing, where importing transformers would fail: the statistics call ``scipy.stats.bootstrap(rng=...)``
(scipy 1.15), and transformers checks its own floors when it is imported (``regex``, ``tokenizers``,
``huggingface-hub``, ``safetensors``, ...): those are read from the installed transformers' own table
(:func:`transformers_floors`, its file read as text, not imported), so a carried newer transformers over a
device's older packages fails here, one line per package, not at its import. ``nvidia-ml-py`` (NVML) missing
is a WARN: timing goes on without NVML's figures.
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from poptune.measure import NvmlDevice, fingerprint, nvml_device

__all__ = ["Check", "OPTIONAL", "REQUIREMENTS", "TRANSFORMERS_IMPORT_CHECKS", "preflight", "transformers_floors",
           "version_checks"]

#: What the check needs that a device's preinstalled packages may lack: package, least version, why.
REQUIREMENTS: tuple[tuple[str, str | None, str], ...] = (
    ("regex", None, "transformers imports it at import"),
    ("scipy", "1.15", "scipy.stats.bootstrap(rng=...)"),
    ("transformers", "5.20", "the model classes and cache API poptune uses"),
)

#: Needed for NVML's figures (telemetry, energy) but not for timing: missing, it is a WARN line.
OPTIONAL: tuple[tuple[str, str | None, str], ...] = (
    ("nvidia-ml-py", None, "NVML: telemetry and energy per prefill; timing goes on without them"),
)

#: The packages transformers checks against its dependency table when it is imported
#: (``transformers/dependency_versions_check.py``; accelerate only where installed).
TRANSFORMERS_IMPORT_CHECKS = ("tqdm", "regex", "packaging", "filelock", "numpy", "tokenizers", "huggingface-hub",
                              "safetensors", "accelerate", "pyyaml")


@dataclass(frozen=True)
class Check:
    """One line of the summary: ``status`` is PASS, FAIL, WARN or SKIP; a FAIL that ``stops`` ends the check."""

    name: str
    status: str
    detail: str
    stops: bool = True

    def line(self) -> str:
        went_on = " (timing went on without it)" if self.status == "FAIL" and not self.stops else ""
        return f"{self.status} {self.name}: {self.detail}{went_on}"


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def version_checks(requirements: tuple[tuple[str, str | None, str], ...] | None = None) -> list[Check]:
    """One line per required package: PASS with its version, FAIL when missing or older than needed. Without
    ``requirements``: :data:`REQUIREMENTS`, then transformers' import-time floors (:func:`transformers_floors`),
    then :data:`OPTIONAL` (WARN where missing)."""
    if requirements is not None:
        return [_version_check(package, least, why) for package, least, why in requirements]
    floors = transformers_floors()  # regex among them, with transformers' floor: its line replaces the plain one
    checks = [_version_check(package, least, why) for package, least, why in REQUIREMENTS if package not in floors]
    checks += [_spec_check(package, spec) for package, spec in floors.items()]
    for package, least, why in OPTIONAL:
        check = _version_check(package, least, why)
        checks.append(Check(check.name, "WARN", check.detail) if check.status == "FAIL" else check)
    return checks


def _version_check(package: str, least: str | None, why: str) -> Check:
    try:
        found = metadata.version(package)
    except metadata.PackageNotFoundError:
        return Check(package, "FAIL", f"not installed (needed: {why})")
    if least is not None and _release(found) < _release(least):
        return Check(package, "FAIL", f"{found} < {least} (needed: {why})")
    return Check(package, "PASS", f"{found}" + (f" (>= {least})" if least else ""))


def transformers_floors() -> dict[str, str]:
    """What the installed transformers requires of each package it checks at import (package -> specifier,
    e.g. ``"tokenizers": ">=0.23.1,<0.24.0"``), read from its ``dependency_versions_table.py`` as text; {} where
    transformers is not installed. accelerate is left out where it is not installed (transformers skips it)."""
    try:
        table = metadata.distribution("transformers").locate_file("transformers/dependency_versions_table.py")
        tree = ast.parse(Path(str(table)).read_text())
    except (metadata.PackageNotFoundError, OSError, SyntaxError):
        return {}
    deps: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "deps" for t in node.targets):
            deps = ast.literal_eval(node.value)
    floors = {}
    for package in TRANSFORMERS_IMPORT_CHECKS:
        requirement = deps.get(package, package)
        if package == "accelerate" and not _installed(package):
            continue
        floors[package] = re.sub(r"^[A-Za-z0-9_.\-]+", "", requirement).strip()  # the version clauses
    return floors


def _installed(package: str) -> bool:
    try:
        metadata.version(package)
    except metadata.PackageNotFoundError:
        return False
    return True


def _spec_check(package: str, spec: str) -> Check:
    """PASS when the installed ``package`` meets ``spec`` (``>=a,<b``); FAIL naming what transformers needs."""
    why = f"transformers {metadata.version('transformers')} checks it at import"
    try:
        found = metadata.version(package)
    except metadata.PackageNotFoundError:
        return Check(package, "FAIL", f"not installed (needed: {why})")
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = re.match(r"(==|!=|>=|<=|>|<|~=)?\s*(.*)", clause)
        assert match is not None  # both groups may be empty: every string matches
        op, bound = match.groups()
        if not _meets(_release(found), op or ">=", _release(bound)):
            return Check(package, "FAIL", f"{found} does not meet {spec} (needed: {why})")
    return Check(package, "PASS", f"{found}" + (f" ({spec})" if spec else ""))


def _meets(found: tuple[int, ...], op: str, bound: tuple[int, ...]) -> bool:
    width = max(len(found), len(bound))
    a, b = found + (0,) * (width - len(found)), bound + (0,) * (width - len(bound))
    return {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b, "~=": a >= b}[op]


def _busy_energy(gpu: NvmlDevice, device: torch.device, seconds: float) -> tuple[float | None, float]:
    """Joules NVML counts during ``seconds`` of back-to-back bf16 matmuls, and the seconds they took."""
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize(device)
    before, start = gpu.energy_mj(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            a @ a  # (4096, 4096): about 0.14 TFLOP per product
        torch.cuda.synchronize(device)
    elapsed, after = time.perf_counter() - start, gpu.energy_mj()
    return (None if before is None or after is None else (after - before) / 1000.0), elapsed


def _nvml_checks(gpu: NvmlDevice, device: torch.device) -> list[Check]:
    """NVML's lines; each FAIL is one that does not stop the check (timing goes on without that figure)."""
    if not gpu.available:
        return [Check("nvml", "FAIL", "; ".join(gpu.notes) or "NVML not available", stops=False)]
    checks = [Check("nvml", "PASS", f"NVML handle matched to {device} by UUID {gpu.uuid}")]
    joules, seconds = _busy_energy(gpu, device, 1.0)
    if joules is None or joules <= 0:
        checks.append(Check("energy", "FAIL", f"energy counter did not advance in {seconds:.2f} s of matmul "
                                              f"({'; '.join(gpu.notes) or 'read 0'})", stops=False))
    else:
        checks.append(Check("energy", "PASS",
                            f"{joules:.1f} J in {seconds:.2f} s of matmul ({joules / seconds:.0f} W)"))
    sample = gpu.sample()
    if sample["sm_clock_mhz"] is None or sample["mem_clock_mhz"] is None:
        checks.append(Check("clocks", "FAIL", "; ".join(gpu.notes) or "clocks unreadable", stops=False))
    else:
        checks.append(Check("clocks", "PASS", f"SM {sample['sm_clock_mhz']} MHz, memory {sample['mem_clock_mhz']} MHz, "
                                              f"reasons {sample['clock_reasons']}"))
    return checks


def preflight(device: torch.device, *, tiny: bool) -> tuple[list[Check], dict[str, Any] | None]:
    """The preflight checks and the hardware record; on CPU (``--tiny`` only) each is skipped with the reason."""
    if device.type != "cuda":
        if not tiny:
            return [Check("cuda", "FAIL", "CUDA is not available: the full check needs one GPU (or pass --tiny)")], None
        reason = f"{device} device: no CUDA, no NVML"
        skipped = [Check(name, "SKIP", reason) for name in ("cuda", "nvml", "energy", "clocks")]
        return skipped, fingerprint(device).to_dict()
    hardware = fingerprint(device)
    assert hardware.memory_bytes is not None  # a CUDA device's fingerprint has its memory
    checks = [Check("cuda", "PASS", f"{hardware.name}, {hardware.memory_bytes / 2**30:.0f} GiB, driver "
                                    f"{hardware.driver_version}, torch {torch.__version__} "
                                    f"(CUDA {torch.version.cuda})")]
    with nvml_device(hardware) as gpu:
        checks += _nvml_checks(gpu, device)
    return checks, hardware.to_dict()
