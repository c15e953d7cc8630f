"""A driver SIGKILLed during a trial: the next run re-queues it; nothing lost, doubled or left.

The study lives on the real Postgres server, written as a user writes it (`postgresql://`, tuner
picks the installed driver): the session's SQLite study (tests/e2e/conftest.py) covers SQLite,
this one the server database, so CI pays for one study per backend and not two on Postgres.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.e2e.conftest import TASKS, run_optimize, tuner_env
from tuner.attrs import TrialAttr
from tuner.server.reaper import port_free
from tuner.storage import Store

# Out of CI's core (tests/conftest.py SLOW_SUITES): `pytest -m extended` runs it.
pytestmark = [pytest.mark.vllm, pytest.mark.extended]


def _pid_files(state_dir: Path) -> list[dict[str, int]]:
    return [json.loads(p.read_text()) for p in state_dir.glob("server-*.json")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def _wait_for_running_server(url: str, state_dir: Path, timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(2)
        # A server's pid file appears only after the driver created its tables and the study;
        # reading the study before that would race the driver's migration.
        files = _pid_files(state_dir)
        if not files:
            continue
        study = optuna.load_study(study_name="killed", storage=url)
        if study.get_trials(states=(TrialState.RUNNING,)):
            return files[0]
    raise AssertionError("no trial reached a running server in time")


@pytest.mark.postgres
def test_sigkilled_driver_resumes_without_loss(
    postgres_url: str, cache_dir: Path, smollm2_path: Path, e2e_space: Path
) -> None:
    url = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    state_dir = cache_dir / "run"
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(e2e_space),
        "--storage", url, "--study", "killed", "--n-trials", "1", "--tasks", str(TASKS),
    ]  # fmt: skip
    driver = subprocess.Popen(
        argv, env=tuner_env(cache_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        server = _wait_for_running_server(postgres_url, state_dir, timeout_s=600)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    # The driver is gone; its server is an orphan until the next run reaps it.
    proc = run_optimize(e2e_space, url, "killed", cache_dir, 1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not _alive(server["pid"])
    assert port_free("127.0.0.1", server["port"])
    assert not _pid_files(state_dir)

    study = optuna.load_study(study_name="killed", storage=postgres_url)
    first, second = study.trials
    assert first.state == TrialState.FAIL
    assert first.user_attrs[TrialAttr.FAILURE_KIND] == "interrupted"
    assert second.state == TrialState.COMPLETE
    assert second.params == first.params
    assert second.user_attrs[TrialAttr.REQUEUED_FROM] == first.number
    assert second.user_attrs[TrialAttr.ROLE] == "baseline"
    store = Store(postgres_url)
    assert store.trial_numbers("killed") == [second.number]  # nothing stored twice
    assert len(store.workload_runs("killed")) == 1
    store.close()
