"""Two drivers that reach the same confirmation round at the same moment queue it once.

`tests/integration/test_drivers_confirm.py` runs two real drivers through the stage, but their
race window (reading which runs a round lacks, then queueing them) is a few milliseconds and
that test passes with the lock removed (docs/broken-variants.md). Here the window is held open:
the read of the study's runs waits a second before it returns, and two threads (each its own
storage connection, as two drivers have) queue the same round at once. Without the study's
confirm lock both read "nothing queued" and the round is queued twice.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, create_trial

import tuner.study.stages.confirm_rounds as confirm
from tuner.attrs import Role, TrialAttr

pytestmark = pytest.mark.postgres


def _configs(study: optuna.Study) -> list[FrozenTrial]:
    dist = {"method": CategoricalDistribution(["none", "ngram"])}
    for method, role in (("none", Role.BASELINE), ("ngram", Role.CANDIDATE)):
        study.add_trial(
            create_trial(
                params={"method": method},
                distributions=dist,
                value=100.0,
                user_attrs={TrialAttr.ROLE: role.value},
            )
        )
    return study.get_trials(deepcopy=False)


def _race(url: str, monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[int, int]]:
    optuna.create_study(study_name="race", storage=url, direction="maximize")
    configs = _configs(optuna.load_study(study_name="race", storage=url))
    slow_read = confirm._already

    def held_open(trials: list[FrozenTrial]) -> Any:
        done = slow_read(trials)
        time.sleep(1.0)  # the other driver reads now, unless the lock keeps it out
        return done

    monkeypatch.setattr(confirm, "_already", held_open)
    queued: list[int] = []

    def driver() -> None:
        # Each driver loads the study itself, as a separate process does.
        study = optuna.load_study(study_name="race", storage=url)
        queued.append(confirm.queue_rounds_locked(url, study, configs, 1))

    threads = [threading.Thread(target=driver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(queued) == [0, 2], queued  # one driver queued the round, the other nothing
    study = optuna.load_study(study_name="race", storage=url)
    return Counter(
        (t.user_attrs[TrialAttr.CONFIRM_OF], t.user_attrs[TrialAttr.CONFIRM_ROUND])
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get(TrialAttr.ROLE) == Role.CONFIRM.value
    )


def test_two_drivers_queue_one_round_once(
    storage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _race(storage_url, monkeypatch)
    assert runs == Counter({(0, 0): 1, (1, 0): 1})
