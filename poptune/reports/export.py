"""Hardware-specific configurations: the fastest stored POP configuration within an accuracy budget, as JSON.

An exported file names the model (and a fingerprint of its weights), the hardware it was measured on, the
:class:`~poptune.engine.PopConfig`, the measured objectives and where they came from (storage, study, trial,
versions). :func:`load_config` gives the configuration back, refusing one made for another model or another
kind of machine unless forced.

A configuration whose K/V source needs a file carries it (:attr:`poptune.kv.source.KVSource.export_key`; calibrated
K/V: ``kv_maps``, its fitted maps' file, sha256, block and how they were fitted): :func:`write_export` copies the
file beside the JSON (``<stem><suffix>``, ``.kv.safetensors`` for the maps) and :func:`load_carried` attaches it to
a model, refusing a changed file or maps fitted on other weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from poptune import store
from poptune.engine import PopConfig
from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry
from poptune.store.trials import StoredTrial

__all__ = ["FORMAT", "best_within_budget", "carried_path", "check_export_path", "export_config", "load_carried",
           "load_config", "write_export"]

FORMAT = "poptune-config/1"


def best_within_budget(study: Any, max_drop: float | None) -> Any:
    """The fastest POP configuration whose accuracy drop is at most ``max_drop`` points at 95% (None: whatever its
    drop).

    Where the study certified its front on fresh items (:mod:`poptune.tune.certify`), only the certification's
    rows count, with their fresh items' interval: a drop measured on the items that selected it is not a
    verdict. A study stored before certification falls back to its front (:func:`poptune.store.front.front`:
    trials marked noisy and configurations confirmed above their FLOPs ideal are not on it), a trial within the
    budget when its interval's upper end is (an old trial without one: its point estimate).
    """
    if max_drop is not None and not (math.isfinite(max_drop) and max_drop >= 0):
        raise ConfigError(f"`max_drop` must be >= 0 accuracy points (finite) or None, got {max_drop}")

    def within(rows: list[Any]) -> list[Any]:
        return [r for r in rows if r.method == "pop"
                and (max_drop is None or (r.drop if r.drop_ci is None else r.drop_ci.hi) <= max_drop)]

    rows = within([r for r in store.certified(study) if r.verdict != "not certified"])
    if not rows:  # nothing certified within this budget: the search's front, said so in the export's `verdict`
        rows = within(store.front(study))
    if not rows:
        within_what = f"within {max_drop} points of the full model" if max_drop is not None else "on its front"
        raise ConfigError(f"no configuration of study {study.study_name!r} is {within_what}")
    return min(rows, key=lambda r: (r.prefill_ms, r.drop, r.trial))


def export_config(storage: str | None, study_name: str | None, *, max_drop: float | None,
                  model: str | None = None) -> dict:
    """The deployable configuration of a stored study, as a JSON-serialisable dict (``max_drop`` None: the fastest
    configuration, whatever its drop). Its provenance is the study's
    :class:`~poptune.measure.provenance.Provenance` (model, weights, hardware, versions), dated when exported."""
    from poptune.measure.provenance import Provenance, now

    study = store.read_study(storage, study_name)
    stored = store.StoredStudy.of(study)
    if model is not None:
        from poptune.models import resolve_model

        if resolve_model(model).name != stored.model:
            raise ConfigError(f"study {study.study_name!r} is of model {stored.model!r}, not {model!r}")
    if not store.completed(study):
        raise ConfigError(f"study {study.study_name!r} has no completed trial yet: run `poptune study` on it first "
                          "(or wait for its first trial)")
    row = best_within_budget(study, max_drop)
    trial = StoredTrial.of(study.trials[row.trial])
    key = kv_registry.source(row.kv).export_key
    made = Provenance(model=stored.model, weights_fingerprint=stored.weights_fingerprint, hardware=stored.hardware,
                      versions=stored.versions or None, date=now())
    return {
        "format": FORMAT,
        "model": {"name": made.model, "weights_fingerprint": made.weights_fingerprint},
        "hardware": made.hardware,
        "pop_config": row.config.to_dict(),
        **({key: trial.details[key]} if key else {}),
        "objectives": {
            "prefill_ms": row.prefill_ms,
            "speedup": row.speedup,
            "speedup_lo": row.speedup_ci.lo if row.speedup_ci else None,
            "speedup_hi": row.speedup_ci.hi if row.speedup_ci else None,
            "pairs": row.pairs,
            "ideal": row.ideal,
            "confirmed": row.confirmed,
            "accuracy": row.accuracy,
            "drop_points": row.drop,
            "drop_ci": list(row.drop_ci.ends()) if row.drop_ci is not None else None,
            "items": row.items,
            "max_drop": max_drop,
            "verdict": row.verdict or "not certified: its drop was measured on the search's items, which selected it",
            "target_length": trial.target_length,
            "latency": trial.latency,
            "accuracy_per_task": trial.accuracy,
            "full_accuracy_per_task": trial.full_accuracy,
            # every objective of the study by name (kv_bytes, tpot, ...; the row gives others too)
            "study_objectives": {n: row.values[n] for n in stored.objectives if n in row.values},
        },
        "provenance": {
            "storage": store.public_url(storage),
            "study": study.study_name,
            "trial": row.trial,
            "problem": stored.stored_problem,
            "versions": made.versions,
            "measurement": trial.provenance,
            "null_checks": stored.null_checks or None,
            "exported": made.date,
        },
    }


def carried_path(path: str | Path, suffix: str) -> Path:
    """Where :func:`write_export` puts the file a configuration written to ``path`` carries: ``<stem><suffix>``
    beside it (``suffix``: its K/V source's, e.g. ``.kv.safetensors``)."""
    path = Path(path)
    return path.with_name(path.stem + suffix)


def _carrying() -> list[Any]:
    """The K/V sources whose configurations carry a file."""
    return [s for s in kv_registry.SOURCES if s.export_key]


def check_export_path(path: str | Path) -> None:
    """Fail before any work if :func:`write_export` could not write ``path`` or a file it may carry beside it (any
    K/V source's): a folder, a device, a FIFO (poptune writes regular files only), a missing or read-only folder.

    Raises:
        ConfigError: a path cannot be written.
    """
    from poptune.files import check_regular, check_writable_file

    check_writable_file(path)
    for source in _carrying():
        check_regular(carried_path(check_regular(path), source.export_suffix), f"{source.label} file")


def write_export(data: dict, path: str | Path) -> list[Path]:
    """Write an exported configuration to ``path`` (JSON), and the file its K/V source carries beside it
    (``<stem><suffix>``, named relative to the JSON) where it has one. Returns the files written.

    Raises:
        ConfigError: the file the study recorded is gone or changed since (prepare it again: run the study's
            configuration once with its ``--kv``); a target is not a regular file (a device, a FIFO, a folder) or
            cannot be written.
    """
    import shutil

    from poptune.files import check_regular, replacing, write_text
    from poptune.kv.maps import file_sha256

    check_export_path(path)  # every target, before any is written
    path, written = Path(path), []
    for kv in _carrying():
        carried = data.get(kv.export_key)
        if carried is None:
            continue
        source = Path(carried.get("file", ""))
        if not source.is_file() or file_sha256(source) != carried.get("sha256"):
            raise ConfigError(f"the {kv.label} file {source} recorded with the study is gone or changed since")
        target = carried_path(check_regular(path), kv.export_suffix)  # beside the JSON (a link's target)
        if target.resolve() != source.resolve():
            with replacing(target) as tmp:
                shutil.copyfile(source, tmp)
        data = dict(data, **{kv.export_key: dict(carried, file=target.name)})
        written.append(target)
    write_text(path, json.dumps(data, indent=2))
    return [path, *written]


def load_carried(path: str | Path, model: Any, *, fingerprint: str | None = None, force: bool = False) -> None:
    """Attach to ``model`` what an exported configuration carries for its K/V source (calibrated K/V: its maps,
    checked against their recorded sha256 and, unless ``force``, the weights ``fingerprint`` of ``model``);
    nothing for a source that carries nothing.

    Raises:
        ConfigError: a file the export should name and does not. DataError: the file is missing, changed or of
            other weights.
    """
    from poptune.engine import decoder_of

    data = _read(path)
    source = kv_registry.source(data["pop_config"].get("kv", kv_registry.DEFAULT))
    if source.export_key:
        source.load_export(model, decoder_of(model), data[source.export_key], Path(path).parent,
                           fingerprint=None if force else fingerprint)


def _read(path: str | Path) -> dict:
    from poptune.jsonfile import loads

    try:
        text = Path(path).read_text()
    except FileNotFoundError as e:
        raise ConfigError(f"no configuration file {path}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not a poptune configuration file: {e}") from e
    data = loads(text, f"configuration file {path}")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a poptune configuration file (expected format {FORMAT!r})")
    _check_fields(path, data)
    return data


def _check_fields(path: str | Path, data: dict) -> None:
    """Refuse an exported file missing what :func:`load_config` and :func:`load_kv_maps` read, in one line."""
    def text(value: Any) -> bool:
        return isinstance(value, str) and bool(value)

    if not isinstance(data.get("pop_config"), dict):
        raise ConfigError(f"{path} has no `pop_config` object (the configuration itself): export it again")
    if not isinstance(data["pop_config"].get("kv", ""), str):
        raise ConfigError(f"{path}: `pop_config.kv` must name a K/V source: export it again")
    if not isinstance(data.get("model"), dict) or not text(data["model"].get("name")):
        raise ConfigError(f"{path} has no `model.name`: export it again")
    if data["model"].get("weights_fingerprint") is not None and not text(data["model"]["weights_fingerprint"]):
        raise ConfigError(f"{path}: `model.weights_fingerprint` must be a string: export it again")
    if not isinstance(data.get("hardware"), dict) or not text(data["hardware"].get("hardware_id")):
        raise ConfigError(f"{path} has no `hardware.hardware_id`: export it again")
    source = kv_registry.source(data["pop_config"].get("kv", kv_registry.DEFAULT))
    for kv in _carrying():
        carried = data.get(kv.export_key)
        if kv is source and carried is None:
            raise ConfigError(f"{path} uses {kv.label} but names no `{kv.export_key}`: export it again")
        if carried is not None and not (isinstance(carried, dict) and text(carried.get("file"))
                                        and text(carried.get("sha256"))):
            raise ConfigError(f"{path}: `{kv.export_key}` must name its `file` and `sha256` (the file's integrity "
                              "check): export it again")


def load_config(
    path: str | Path, *, model: str | None = None, device: str | None = None, force: bool = False,
    weights: str = "pretrained",
) -> PopConfig:
    """The :class:`PopConfig` of an exported file.

    Args:
        path: The JSON file :func:`export_config` wrote.
        model: If given, the model it will be applied to; another model is refused unless ``force``.
        device: If given, where it will run; another kind of machine (hardware id) is refused unless ``force``.
        force: Apply it anyway.
        weights: The weights of ``model`` (``pretrained`` or ``random``): their fingerprint must be the one the
            file was tuned with, unless ``force`` (a file that names none is refused too: ``force`` says it is
            meant for any weights).
    """
    data = _read(path)
    try:
        config = PopConfig.from_dict(data["pop_config"])
    except (TypeError, AttributeError) as e:  # a field of the wrong type (PopConfig checks values, not types)
        raise ConfigError(f"{path}: `pop_config` is not a configuration ({e}): export it again") from e
    if model is not None and not force:
        from poptune.models import resolve_model, weights_fingerprint

        if resolve_model(model).name != data["model"]["name"]:
            raise ConfigError(
                f"{path} was tuned for {data['model']['name']!r}, not {model!r} (use --force to apply it anyway)"
            )
        tuned = data["model"].get("weights_fingerprint")
        if tuned is None:  # removed or null: the weights check would pass any weights silently (issue 87)
            raise ConfigError(f"{path} names no `model.weights_fingerprint`, so nothing shows it was tuned on these "
                              f"weights of {model}: use --force to apply it on any weights")
        if tuned != weights_fingerprint(model, weights):
            raise ConfigError(f"{path} was tuned on other weights of {model} (fingerprint {tuned}, these are "
                              f"{weights_fingerprint(model, weights)}; use --force to apply it anyway)")
    if device is not None and not force:
        from poptune.measure.hardware import fingerprint

        here, there = fingerprint(device).hardware_id, data["hardware"]["hardware_id"]
        if here != there:
            raise ConfigError(f"{path} was measured on {there}, this is {here} (use --force to apply it anyway)")
    return config
