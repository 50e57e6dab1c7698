"""Stored studies: Optuna storages opened by URL, and what a study's trials say.

- :mod:`~poptune.store.studies`: the one place that opens storages and reads studies, trials and fronts.
- :mod:`~poptune.store.shared`: storages several worker processes can share and survive (retries, heartbeats).
"""

from poptune.store.studies import (
    DEFAULT_STORAGE,
    HEARTBEAT_S,
    MAX_RETRY,
    RETRY_S,
    FrontRow,
    check_storage,
    completed,
    front,
    is_server,
    load_study,
    open_reader,
    open_storage,
    pareto,
    public_url,
    sole_sqlite_worker,
    study_name,
    study_names,
)

__all__ = [
    "DEFAULT_STORAGE", "HEARTBEAT_S", "MAX_RETRY", "RETRY_S", "FrontRow", "check_storage", "completed", "front", "is_server", "load_study",
    "open_reader", "open_storage", "pareto", "public_url", "sole_sqlite_worker", "study_name", "study_names",
]
