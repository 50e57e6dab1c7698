"""What a resumed study refuses: a stored study's tuning problem against the one asked for.

:func:`check_problem` runs before anything is written to a stored study, by the study
(:func:`poptune.tune.study.run_study`) and by the grid (:mod:`poptune.tune.gridstudy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poptune import store
from poptune.errors import ConfigError
from poptune.problem.problem import TuningProblem

if TYPE_CHECKING:
    import optuna

__all__ = ["check_problem"]


def check_problem(study: "optuna.Study", problem: TuningProblem) -> None:
    """Refuse to mix other settings into an existing study (before anything is written to it)."""
    from dataclasses import replace

    stored = store.StoredStudy.of(study).problem or None
    problem = problem.dtype_named()
    if stored is not None and (tasks := store.StoredStudy.of(study).unindexed_tasks):
        raise ConfigError(
            f"study {study.study_name!r} was stored by an older poptune whose per-item outcomes on "
            f"{', '.join(tasks)} may sit under each other's indices (lm-eval named items asked out of order by that "
            "order): it can be read, not resumed; use another --study name")
    if stored is not None:  # the certification's size changes no trial: a resumed study may certify on more items
        stored_problem = TuningProblem.from_dict(stored)
        if stored_problem.dtype is None:  # stored before the dtype was: it was float32 on a CPU, bfloat16 on CUDA
            stored = {**stored, "dtype": "bfloat16" if stored_problem.device.startswith("cuda") else "float32"}
            stored_problem = TuningProblem.from_dict(stored)
        problem = replace(problem, certify_limit=stored_problem.certify_limit,
                          certify_candidates=stored_problem.certify_candidates)
        if stored_problem.data_dir is not None and problem.data_dir is not None:  # the same tasks, wherever the
            problem = replace(problem, data_dir=stored_problem.data_dir)  # data folder lies now (stored as typed)
        if stored_problem.prompts_sha256 is None:  # stored before content hashes: its file's path is what it has
            problem = replace(problem, prompts_sha256=None)
        elif stored_problem.prompts_sha256 == problem.prompts_sha256:  # the same prompts, wherever the file is now
            problem = replace(problem, prompts=stored_problem.prompts)
        elif problem.prompts_sha256 is not None:
            raise ConfigError(
                f"study {study.study_name!r} was made on other prompts: {problem.prompts} holds other content (sha256 "
                f"{problem.prompts_sha256[:12]}..., the study's {stored_problem.prompts_sha256[:12]}...): resume it "
                "with the file it was made with, or use another --study name")
    if stored is not None and TuningProblem.from_dict(stored) != problem:
        changed = sorted(k for k, v in TuningProblem.from_dict(stored).to_dict().items() if problem.to_dict()[k] != v)
        raise ConfigError(
            f"study {study.study_name!r} was made with other settings ({', '.join(changed)}): "
            "use the same options to resume it, or another --study name"
        )
