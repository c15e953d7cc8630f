"""The confirmation stage is over for the study only when no driver still has a run in it.

Two drivers share a study: one whose stage ends (a look stopped it, or its budget did) while
the other still has a confirmation run queued must leave `StudyAttr.CONFIRM_PENDING` set, so
that if the other driver is then killed, the next `tuner optimize` finishes the stage instead
of searching (issue 48). Real SQLite files.
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.attrs import Role, StudyAttr, TrialAttr
from tuner.study.stages.confirm_settle import end_stage

PARAMS = {"method": "none"}
DIST = {"method": CategoricalDistribution(["none", "ngram"])}


def _study(tmp_path: Path) -> tuple[str, optuna.Study]:
    url = f"sqlite:///{tmp_path / 'stage.db'}"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=100.0,
            params=PARAMS,
            distributions=DIST,
            user_attrs={TrialAttr.ROLE: str(Role.BASELINE)},
        )
    )
    study.set_user_attr(StudyAttr.CONFIRM_PENDING, True)
    return url, study


def _pending(url: str) -> object:
    return optuna.load_study(study_name="s", storage=url).user_attrs[StudyAttr.CONFIRM_PENDING]


def test_the_stage_stays_pending_while_another_drivers_run_is_queued(tmp_path: Path) -> None:
    url, study = _study(tmp_path)
    study.enqueue_trial(PARAMS, user_attrs={TrialAttr.ROLE: str(Role.CONFIRM)})
    assert end_stage(url, study) is False
    assert _pending(url) is True


def test_the_stage_stays_pending_while_another_drivers_run_is_running(tmp_path: Path) -> None:
    url, study = _study(tmp_path)
    study.enqueue_trial(PARAMS, user_attrs={TrialAttr.ROLE: str(Role.CONFIRM)})
    running = study.ask()  # the other driver took the queued run
    assert running.user_attrs[TrialAttr.ROLE] == str(Role.CONFIRM)
    assert end_stage(url, study) is False
    assert _pending(url) is True


def test_the_last_driver_out_ends_the_stage(tmp_path: Path) -> None:
    url, study = _study(tmp_path)
    study.enqueue_trial(PARAMS, user_attrs={TrialAttr.ROLE: str(Role.CONFIRM)})
    trial = study.ask()
    study.tell(trial, 101.0)  # the other driver's run finished
    assert end_stage(url, study) is True
    assert _pending(url) is False


def test_a_queued_search_trial_does_not_hold_the_stage(tmp_path: Path) -> None:
    url, study = _study(tmp_path)
    study.enqueue_trial({"method": "ngram"}, user_attrs={TrialAttr.ROLE: str(Role.CANDIDATE)})
    assert end_stage(url, study) is True
    assert _pending(url) is False
