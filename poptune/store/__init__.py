"""Stored studies: Optuna storages opened by URL, and what a study's trials say.

- :mod:`~poptune.store.urls`: storage URLs (the default, which ones processes may share, shown without passwords).
- :mod:`~poptune.store.studies`: the one place that opens storages and loads studies.
- :mod:`~poptune.store.shared`: storages several worker processes can share and survive (retries, heartbeats).
- :mod:`~poptune.store.journal`: journal files, and the partial last record a killed writer left cut before an append.
- :mod:`~poptune.store.measurement`: one configuration's measurement as a study stores it.
- :mod:`~poptune.store.attributes`: the one reader and writer of a study's attributes (:class:`StoredStudy`).
- :mod:`~poptune.store.trials`: the one reader of stored trials (:class:`StoredTrial`) and the latency objective.
- :mod:`~poptune.store.front`: a study's Pareto front of POP configurations.
"""

from poptune.store.attributes import SCHEMA_VERSION, StoredStudy
from poptune.store.front import FrontRow, certified, front, pareto
from poptune.store.measurement import POP, Measurement, method_of
from poptune.store.studies import (
    HEARTBEAT_S,
    MAX_RETRY,
    RETRY_S,
    check_storage,
    load_study,
    open_reader,
    open_storage,
    read_study,
    sole_sqlite_worker,
    study_names,
)
from poptune.store.trials import (
    StoredTrial,
    check_trials,
    completed,
    confirmations,
    is_answer,
    is_pop,
    latency_objective,
    measured_table,
    reference_ms,
)
from poptune.store.urls import DEFAULT_STORAGE, check_study_name, check_url, is_server, public_url, study_name

__all__ = [
    "DEFAULT_STORAGE", "HEARTBEAT_S", "MAX_RETRY", "POP", "RETRY_S", "SCHEMA_VERSION", "FrontRow", "Measurement",
    "StoredStudy", "StoredTrial",
    "certified", "check_storage", "check_study_name", "check_trials", "check_url", "completed", "confirmations",
    "front", "is_answer", "is_pop", "is_server", "latency_objective", "load_study", "measured_table", "method_of",
    "open_reader", "open_storage", "pareto", "public_url", "read_study", "reference_ms",
    "sole_sqlite_worker", "study_name", "study_names",
]
