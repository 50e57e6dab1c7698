"""Journal files survive a writer killed mid-append: the partial record is cut aside, never appended onto.

The fault test replays a kill -9 at many byte offsets of one small journal: each cut copy is resumed through
poptune's own storage opening (one more trial), and must read back every trial completed before the cut.
"""

from __future__ import annotations

import json
import logging
import random

import optuna
import pytest
from optuna.storages.journal._storage import JournalOperation
from optuna.trial import TrialState

from poptune import store
from poptune.store.journal import cut_partial_record, partial_record_start

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

#: Cut points of the fault test (kill -9 mid-append, replayed by truncation).
CUTS = 200


def _objective(trial: optuna.Trial) -> float:
    return trial.suggest_float("x", 0.0, 1.0) ** 2


def _resume(url: str, trials: int = 1) -> optuna.Study:
    """A study resumed as `poptune study` resumes one: a writer's storage (heartbeats), then more trials."""
    study = optuna.create_study(storage=store.open_storage(url, heartbeat=30), study_name="s", load_if_exists=True)
    study.optimize(_objective, n_trials=trials)
    return study


def _completed(url: str) -> dict[int, tuple[float, dict]]:
    """Completed trials as a reader reads them: number -> (value, params)."""
    storage = store.open_reader(url)
    if "s" not in store.study_names(storage):
        return {}
    study = optuna.load_study(study_name="s", storage=storage)
    return {t.number: (t.value, t.params) for t in study.get_trials(states=(TrialState.COMPLETE,))}


def _assert_valid(data: bytes) -> None:
    assert data.endswith(b"\n")
    assert all(isinstance(json.loads(line), dict) for line in data.splitlines())


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[bytes, dict[int, tuple[int, float, dict]]]:
    """A small journal of one study with four completed trials, and where each trial's completion record ends."""
    path = tmp_path_factory.mktemp("base") / "j.log"
    url = f"journal:{path}"
    _resume(url, trials=4)
    data = path.read_bytes()
    done = {n: v for n, v in _completed(url).items()}
    ends: dict[int, tuple[int, float, dict]] = {}
    offset = 0
    for line in data.splitlines(keepends=True):
        offset += len(line)
        record = json.loads(line)
        if (record["op_code"] == JournalOperation.SET_TRIAL_STATE_VALUES
                and record["state"] == TrialState.COMPLETE.value):
            number = record["trial_id"]  # one study: trial ids are its trial numbers
            ends[number] = (offset, *done[number])
    assert len(ends) == 4
    return data, ends


def test_every_completed_trial_survives_a_kill_mid_append(base, tmp_path, caplog, monkeypatch):
    data, ends = base
    # The kill is replayed by truncating a copy, so syncing to disk proves nothing here and costs most of the time.
    monkeypatch.setattr("os.fsync", lambda fd: None)
    cut_within_a_record = 0
    for seed in range(CUTS):
        cut = random.Random(seed).randrange(1, len(data))
        path = tmp_path / f"{seed}.log"
        path.write_bytes(data[:cut])
        url = f"journal:{path}"
        complete = data.rfind(b"\n", 0, cut) + 1  # the end of the last complete record before the cut
        cut_within_a_record += complete < cut
        expected = {n: (value, params) for n, (end, value, params) in ends.items() if end <= cut}

        _resume(url)

        after = path.read_bytes()
        _assert_valid(after)
        assert after.startswith(data[:complete]), f"seed {seed}: a complete record changed"
        aside = path.with_name(path.name + ".partial")
        if complete < cut:
            assert aside.read_bytes() == data[complete:cut], f"seed {seed}"
        else:
            assert not aside.exists(), f"seed {seed}"
        read = _completed(url)
        assert {n: read.get(n) for n in expected} == expected, f"seed {seed} (cut at byte {cut})"
        assert len(read) == len(expected) + 1, f"seed {seed}"
    assert cut_within_a_record > CUTS * 0.9  # most cuts fall inside a record, a few on a record's end
    assert sum("moved to" in r.getMessage() for r in caplog.records) == cut_within_a_record


def test_a_study_resumed_on_a_cut_journal_keeps_every_trial(tmp_path, caplog):
    """The issue's case: the next record was appended onto the cut line, and the whole journal was lost."""
    path = tmp_path / "j.log"
    url = f"journal:{path}"
    _resume(url, trials=3)
    path.write_bytes(path.read_bytes()[:-7])  # killed while appending its last record: trial 2's completion
    before = _completed(url)  # readers skip the partial record (Optuna's own reader does)
    assert sorted(before) == [0, 1]

    _resume(url)
    _resume(url)  # and again: the journal is still whole

    _assert_valid(path.read_bytes())
    read = _completed(url)
    assert {n: read[n] for n in before} == before and len(read) == len(before) + 2
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1  # the cut is said once, in one line, naming where its bytes went
    assert "\n" not in said[0] and f"{path}.partial" in said[0] and "last record was cut" in said[0]


def test_readers_leave_a_cut_journal_as_it_is(tmp_path):
    path = tmp_path / "j.log"
    url = f"journal:{path}"
    _resume(url, trials=2)
    cut = path.read_bytes()[:-5]
    path.write_bytes(cut)
    assert len(_completed(url)) == 1  # the last trial's completion was the record cut
    store.check_storage(url)
    assert path.read_bytes() == cut and not (tmp_path / "j.log.partial").exists()


def test_a_worker_already_open_cuts_what_a_killed_sibling_left(tmp_path):
    """Workers share a journal: one killed mid-append leaves a partial line under a live worker's next append."""
    path = tmp_path / "j.log"
    url = f"journal:{path}"
    live = _resume(url, trials=1)
    with open(path, "ab") as f:
        f.write(b'{"op_code":4,"worker_id":"killed-sibling","study_id":0,"datetime_st')
    live.optimize(_objective, n_trials=1)
    _assert_valid(path.read_bytes())
    assert len(_completed(url)) == 2
    assert (tmp_path / "j.log.partial").read_bytes().endswith(b'"datetime_st')


def test_a_journal_cut_in_its_first_record_is_still_a_journal(tmp_path):
    path = tmp_path / "j.log"
    path.write_bytes(b'{"op_code":0,"worker_id":"w","study_name":"s","direct')
    _resume(f"journal:{path}")
    _assert_valid(path.read_bytes())
    assert len(_completed(f"journal:{path}")) == 1


@pytest.mark.parametrize("tail,cut", [
    (b"", False),                         # ends with a complete record
    (b'{"op_code":6,"trial', True),       # no newline: a cut record
    (b'{"op_code":6}', True),             # whole JSON but no newline: its newline was cut
    (b"\x00\x00\x00\x00\n", True),        # zeros a crash left where the record should be
])
def test_the_last_record_is_partial_when_it_is_not_a_whole_line_of_json(tmp_path, tail, cut):
    path = tmp_path / "j.log"
    good = b'{"op_code":0,"worker_id":"w"}\n' * 3
    path.write_bytes(good + tail)
    assert (partial_record_start(path) is not None) == cut
    assert cut_partial_record(path) == len(tail if cut else b"")
    assert path.read_bytes() == good
