"""Two `tuner optimize` drivers on one Postgres study, one of them killed mid-trial.

Each driver is a real process with its own local Ray, in a process group of its own; the killed
one loses its whole group (driver, Ray, workers) at once. Trials start the fake vLLM
(`tuner.testing.fake_vllm`, a named fake): two real CPU servers do not fit this machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml
from optuna.trial import TrialState

from tests.integration.conftest import fake_preset
from tests.integration.test_ray_cluster import _fake_servers
from tuner.attrs import TrialAttr
from tuner.study.search.roles import counts_toward_budget

# Out of CI (-m kill, with the real-server kill suite): 179 s of CI's 2,864 s on a Zen 4, the
# killed driver is also covered by tests/faults/test_driver_kill.py and sharing by
# test_study_drivers.py.
pytestmark = [pytest.mark.ray, pytest.mark.postgres, pytest.mark.kill]

N_TRIALS = 4


def _running_of(url: str, pid: int) -> int | None:
    """The number of a RUNNING trial whose driver is `pid` (plain SQL: no Optuna tables made)."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(
                    "SELECT t.number, a.value_json FROM trials t JOIN trial_user_attributes a "
                    "ON a.trial_id = t.trial_id WHERE t.state = 'RUNNING' AND a.key = 'driver'"
                )
            ).all()
    except sqlalchemy.exc.SQLAlchemyError:
        return None
    finally:
        engine.dispose()
    for number, value in rows:
        if f'"pid": {pid}' in value:
            return int(number)
    return None


def test_a_killed_driver_s_trial_is_finished_by_the_other(
    postgres_url: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex
    preset = fake_preset(
        {"FAKE_VLLM_STARTUP_S": "2.0", "FAKE_VLLM_TOKEN_DELAY_S": "0.05", "TUNER_TEST_TAG": tag},
        tasks=6,
        tool_latency_s=0.05,
        gpu={"name": "cpu", "cpu": True},
        space={
            "methods": ["none", "ngram"],
            "max_num_seqs": [4, 8],
            "kv_cache_memory_bytes": [300000000, 2000000000],
        },
        baseline=None,
        throughput_streams=[1],
        throughput_requests=2,
        throughput_output_tokens=8,
    )
    space = tmp_path / "fake.yaml"
    space.write_text(yaml.safe_dump(preset))
    env = {
        **os.environ,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "TUNER_CACHE_DIR": str(tmp_path / "cache"),
    }
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage",
        postgres_url, "--study", "shared", "--n-trials", str(N_TRIALS), "--confirm", "0",
    ]  # fmt: skip

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    survivor = start()
    deadline = time.monotonic() + 180
    while _running_of(postgres_url, survivor.pid) is None:  # the study exists and runs
        assert survivor.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    victim = start()
    while (held := _running_of(postgres_url, victim.pid)) is None:
        assert victim.poll() is None, victim.communicate()[0]
        assert time.monotonic() < deadline, "the second driver never ran a trial"
        time.sleep(0.3)
    time.sleep(3)  # inside the trial: its server is up
    os.killpg(victim.pid, signal.SIGKILL)  # the driver, its Ray and its workers at once
    victim.wait(30)
    out = survivor.communicate(timeout=400)[0]
    assert survivor.returncode == 0, out

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials()
    by_number = {t.number: t for t in trials}
    gone = by_number[held]
    assert gone.state == TrialState.FAIL, gone
    assert gone.user_attrs[TrialAttr.FAILURE_KIND] == "interrupted"
    assert "driver stopped" in gone.user_attrs[TrialAttr.FAILURE_REASON]
    again = [t for t in trials if t.user_attrs.get(TrialAttr.REQUEUED_FROM) == held]
    assert len(again) == 1 and again[0].state == TrialState.COMPLETE, again
    assert again[0].user_attrs[TrialAttr.DRIVER]["pid"] == survivor.pid
    assert again[0].params == gone.params
    measured = [t for t in trials if counts_toward_budget(t)]
    assert len(measured) == N_TRIALS, [(t.number, t.state, t.user_attrs) for t in trials]
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    # The killed driver's server went with it (its supervisor saw the worker die).
    assert _fake_servers(tag) == []
