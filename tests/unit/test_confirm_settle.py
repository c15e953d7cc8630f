"""The confirmation stage with another driver on the study
(`tuner.study.stages.confirm_settle._settle`).

A SQLite study stands in for the shared one; "running a run" is told by hand (the stub of
`run_queue`), so no server starts. What is real: Optuna's storage, the other driver's process
(alive, or exited), and resume's recovery of a dead driver's trials.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner.attrs import Role, TrialAttr
from tuner.study.search.resume import ask, heartbeat_storage, this_driver
from tuner.study.stages.confirm_settle import _settle


def _study(url: str) -> optuna.Study:
    return optuna.create_study(study_name="s", storage=heartbeat_storage(url), direction="maximize")


def _running_confirm(study: optuna.Study, pid: int) -> int:
    """A confirmation run (config #0, round 1) that driver `pid` on this host holds."""
    study.enqueue_trial(
        {}, user_attrs={TrialAttr.ROLE: str(Role.CONFIRM), TrialAttr.CONFIRM_OF: 0,
                        TrialAttr.CONFIRM_ROUND: 1}, skip_if_exists=False,
    )  # fmt: skip
    trial = ask(study)
    trial.set_user_attr(TrialAttr.DRIVER, {**this_driver(), "pid": pid})
    return trial.number


def _runner(url: str, ran: list[int]) -> Callable[[], optuna.Study]:
    """`run_queue`: tells every queued run complete here, as run_waiting would run it."""

    def run_queue() -> optuna.Study:
        study = optuna.load_study(study_name="s", storage=url)
        while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            trial = study.ask()
            ran.append(trial.number)
            study.tell(trial, 100.0)
        return study

    return run_queue


def test_a_dead_driver_s_confirmation_run_is_run_here_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _study(url)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    held = _running_confirm(study, dead.pid)
    ran: list[int] = []
    said: list[str] = []
    # In a thread with a limit: a stage that never recovers the run would wait for ever.
    settle = threading.Thread(
        target=_settle, args=(url, "s", _runner(url, ran), said.append), kwargs={"poll_s": 0.1}
    )
    settle.start()
    settle.join(30)
    assert not settle.is_alive(), "the dead driver's run was never recovered"
    trials = {t.number: t for t in optuna.load_study(study_name="s", storage=url).trials}
    assert trials[held].state == TrialState.FAIL
    assert trials[held].user_attrs[TrialAttr.FAILURE_KIND] == "interrupted"
    # Its copy, same config and round, ran here; nothing else did.
    assert len(ran) == 1 and trials[ran[0]].user_attrs[TrialAttr.REQUEUED_FROM] == held
    assert trials[ran[0]].user_attrs[TrialAttr.CONFIRM_ROUND] == 1
    assert said == [
        f"confirmation: waiting for run #{held} (confirmation of #0, round 2) of another "
        f"driver (pid {dead.pid}); each is run once for the study"
    ]


def test_a_live_driver_s_run_is_waited_for_not_repeated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _study(url)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        held = _running_confirm(study, other.pid)

        def finish() -> None:  # the other driver's run ends after a while
            time.sleep(1.0)
            optuna.load_study(study_name="s", storage=url).tell(held, 100.0)

        threading.Thread(target=finish).start()
        ran: list[int] = []
        start = time.monotonic()
        _settle(url, "s", _runner(url, ran), lambda _: None, poll_s=0.1)
        assert time.monotonic() - start >= 0.9  # it waited for that run ...
        assert ran == []  # ... and ran nothing again
        trials = optuna.load_study(study_name="s", storage=url).trials
        assert [t.state for t in trials] == [TrialState.COMPLETE]
    finally:
        other.kill()
        other.wait()
