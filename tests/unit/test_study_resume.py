"""Resume and shared studies on a real SQLite file: heartbeats, dead drivers, half-done recoveries.

Each kill point of the recovery is reproduced by leaving the study exactly as a SIGKILL there
would (a RUNNING trial with a stale heartbeat or a dead driver's pid; a FAIL without its
re-queued copy; rows stored for a trial never told), then checking the next start repairs it.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.attrs import StudyAttr, TrialAttr
from tuner.records import ServerStartRecord
from tuner.storage import Store, TrialMeasurements
from tuner.study.search import resume
from tuner.study.search.resume import (
    ask,
    budget_target,
    ensure_baseline,
    heartbeat_storage,
    recover,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

PARAMS = {"method": "none", "max_num_seqs": 8}
DIST = {
    "method": optuna.distributions.CategoricalDistribution(["none", "ngram"]),
    "max_num_seqs": optuna.distributions.CategoricalDistribution([4, 8]),
}


def _study(tmp_path: Path) -> optuna.Study:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    Store(url).engine  # tuner's tables, as optimize() creates them  # noqa: B018
    return optuna.create_study(storage=heartbeat_storage(url), study_name="s", direction="maximize")


def _running(study: optuna.Study, driver: dict[str, object], role: str = "baseline") -> int:
    study.enqueue_trial(PARAMS, user_attrs={TrialAttr.ROLE: role})
    trial = ask(study)
    for name, dist in DIST.items():
        trial._suggest(name, dist)
    study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
    trial.set_user_attr(TrialAttr.DRIVER, driver)
    return trial.number


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_dead_driver_on_this_host_is_recovered_at_once(tmp_path: Path) -> None:
    study = _study(tmp_path)
    n = _running(study, {"host": socket.gethostname(), "pid": _dead_pid()})
    assert recover(study, None) == [n]
    old, new = study.get_trials()
    assert old.state == TrialState.FAIL
    assert old.user_attrs[TrialAttr.FAILURE_KIND] == "interrupted"
    assert new.state == TrialState.WAITING and new.params == PARAMS
    assert new.user_attrs[TrialAttr.REQUEUED_FROM] == n
    assert new.user_attrs[TrialAttr.ROLE] == "baseline"
    assert TrialAttr.DRIVER not in new.user_attrs
    assert recover(study, None) == []  # idempotent
    assert len(study.get_trials()) == 2


def test_another_hosts_driver_is_recovered_by_its_stale_heartbeat_and_retried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resume, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(resume, "GRACE_PERIOD_S", 1)
    study = _study(tmp_path)
    elsewhere = {"host": "another-host", "pid": 1}
    first = _running(study, elsewhere)
    assert recover(study, None) == []  # its heartbeat is fresh: another driver runs it
    time.sleep(2.2)
    assert recover(study, None) == [first]
    retry = study.get_trials()[-1]
    assert retry.user_attrs[TrialAttr.REQUEUED_FROM] == first
    # The retry dies too: it is failed but not queued a third time.
    again = ask(study)
    study._storage.record_heartbeat(again._trial_id)  # type: ignore[attr-defined]
    again.set_user_attr(TrialAttr.DRIVER, elsewhere)
    time.sleep(2.2)
    assert recover(study, None) == [again.number]
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.FAIL]


def test_a_kill_between_fail_and_requeue_is_repaired_and_untold_rows_are_deleted(
    tmp_path: Path,
) -> None:
    study = _study(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'study.db'}")
    n = _running(study, {"host": "another-host", "pid": 1})
    start = ServerStartRecord(argv=("vllm",), env={}, log_path="x.log")
    store.save_trial("s", n, TrialMeasurements((start,), None, ()))  # stored, never told
    study.tell(n, state=TrialState.FAIL)  # the FAIL of Optuna's stale check; then the kill
    assert recover(study, store) == []
    _, new = study.get_trials()
    assert new.state == TrialState.WAITING and new.user_attrs[TrialAttr.REQUEUED_FROM] == n
    assert store.trial_numbers("s") == []
    store.close()


def test_a_trial_whose_driver_is_killed_again_and_again_is_queued_again_as_a_chain(
    tmp_path: Path,
) -> None:
    study = _study(tmp_path)
    first = _running(study, {"host": socket.gethostname(), "pid": _dead_pid()})
    recover(study, None)
    numbers = [first]
    for _ in range(2):  # the re-queued copy's driver is killed too, twice
        again = ask(study)
        again.set_user_attr(TrialAttr.DRIVER, {"host": socket.gethostname(), "pid": _dead_pid()})
        assert recover(study, None) == [again.number]
        numbers.append(again.number)
    *failed, waiting = study.get_trials()
    assert [t.number for t in failed] == numbers
    assert all(t.user_attrs[TrialAttr.FAILURE_KIND] == "interrupted" for t in failed)
    assert waiting.state == TrialState.WAITING and waiting.params == PARAMS
    chain = [t.user_attrs.get(TrialAttr.REQUEUED_FROM) for t in study.get_trials()]
    assert chain == [None, *numbers]  # each copy names the one before: no fork, no loss
    assert waiting.user_attrs[TrialAttr.ROLE] == "baseline"


def test_the_baseline_is_queued_again_when_its_retry_was_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resume, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(resume, "GRACE_PERIOD_S", 1)
    study = _study(tmp_path)
    assert ensure_baseline(study, PARAMS)
    assert not ensure_baseline(study, PARAMS)  # queued already
    elsewhere = {"host": "another-host", "pid": 1}
    for _ in range(2):  # its driver's host goes silent, twice: retried once, then not
        trial = ask(study)
        study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
        trial.set_user_attr(TrialAttr.DRIVER, elsewhere)
        time.sleep(2.2)
        recover(study, None)
    assert not study.get_trials(states=(TrialState.WAITING,))
    assert ensure_baseline(study, PARAMS)
    (waiting,) = study.get_trials(states=(TrialState.WAITING,))
    assert waiting.user_attrs[TrialAttr.ROLE] == "baseline"


def test_an_unfinished_runs_target_is_continued_then_a_new_run_adds(tmp_path: Path) -> None:
    study = _study(tmp_path)
    assert budget_target(study, 6) == (6, False)
    study.add_trial(
        optuna.trial.create_trial(
            params=PARAMS, distributions=DIST, value=1.0, user_attrs={TrialAttr.ROLE: "baseline"}
        )
    )
    assert budget_target(study, 6) == (6, True)  # killed at 1 of 6: the same command continues
    study.set_user_attr(StudyAttr.TARGET, 1)  # that run finished
    assert budget_target(study, 6) == (7, False)
