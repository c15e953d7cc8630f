"""Faults of what runs around the server: the Ray worker, Postgres, the disk under SQLite.

- The Ray worker (the actor process that launched the server) SIGKILLed mid-trial: its server
  goes with it (the supervisor), the trial is re-queued once and measured by a new worker.
- Postgres restarted (`pg_ctlcluster ... restart`) while a trial runs: the driver waits the
  restart out (pooled connections pinged, refused connects retried) and finishes the study;
  nothing lost, nothing stored twice.
- The disk under the SQLite file fills up while a trial runs: the driver stops with one clear
  line on stderr (exit 2), leaves no vLLM process, and once space is back the database opens,
  passes SQLite's integrity check, and the same command finishes the study.

Real Ray, the real Postgres server, a real tmpfs (root only), and the named fake vLLM server
(tuner/testing/fake_vllm.py, slowed to about a minute per trial): these faults are in the layers
around the server, which a real one would only make a minute slower per start; the real
server's own faults and its process group are tested in test_server_faults.py and
test_driver_kill.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.faults.conftest import Box, optimize_argv, phase_of, short_space, wait_gone
from tests.faults.tally import measure
from tuner.attrs import TrialAttr
from tuner.storage import Store

pytestmark = [pytest.mark.ray, pytest.mark.faults]


@pytest.fixture
def fake_box(box: Box) -> Box:
    """The box with the fake server in place of vLLM, logging its requests, slowed down."""
    env = {
        **box.env,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "FAKE_VLLM_ACCESS_LOG": "1",
        "FAKE_VLLM_TOKEN_DELAY_S": "0.1",  # phases of several seconds to hit
    }
    return Box(box.cache, env)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_phase(box: Box, driver: subprocess.Popen[str], phase: str) -> dict[str, int]:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        assert driver.poll() is None, driver.communicate()[1][-3000:]
        logs, servers = box.logs(), box.servers()
        if logs and servers and phase_of(logs[-1]) == phase:
            return max(servers, key=lambda s: s["started_at"])
        time.sleep(0.2)
    raise AssertionError(f"no server reached {phase}")


def test_ray_worker_killed_mid_trial_is_requeued_once(tmp_path: Path, fake_box: Box) -> None:
    url = f"sqlite:///{tmp_path / 'workerkill.db'}"
    argv = optimize_argv(short_space(tmp_path), url, "workerkill", 1)
    driver = subprocess.Popen(
        argv, env=fake_box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    box = fake_box
    group = _wait_phase(box, driver, "warmup")
    worker = int(group["owner_pid"])
    assert "ray" in _cmdline(worker).lower() or "default_worker" in _cmdline(worker)
    os.kill(worker, signal.SIGKILL)
    gone_s = wait_gone([group], 60)
    measure("ray_worker_kill_server_gone_s", round(gone_s, 2))
    assert gone_s < 15, f"the killed worker's server lived {gone_s} s"
    out, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, out + err

    trials = optuna.load_study(study_name="workerkill", storage=url).get_trials()
    crashed = [t for t in trials if t.user_attrs.get(TrialAttr.FAILURE_KIND) == "worker_crashed"]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(crashed) == 1, [(t.number, t.state, t.user_attrs) for t in trials]
    assert len(done) == 1 and done[0].params == crashed[0].params
    assert done[0].user_attrs[TrialAttr.REQUEUED_FROM] == crashed[0].number
    store = Store(url)
    try:
        assert store.trial_numbers("workerkill") == [done[0].number]
    finally:
        store.close()


@pytest.fixture
def own_postgres_db(postgres_server: str) -> Iterator[str]:
    """A fresh database whose admin connections are never pooled (they die in the restart)."""
    name = f"tuner_faults_{uuid.uuid4().hex[:10]}"
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        for _ in range(30):  # the server may still be coming back
            try:
                with admin.connect() as conn:
                    conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = :n AND pid <> pg_backend_pid()"
                        ),
                        {"n": name},
                    )
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
                break
            except Exception:
                time.sleep(1)
        admin.dispose()


def _pg_restart() -> float:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    t0 = time.monotonic()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return time.monotonic() - t0


@pytest.mark.postgres
def test_postgres_restarted_mid_study_is_waited_out(
    own_postgres_db: str, tmp_path: Path, fake_box: Box
) -> None:
    box = fake_box
    url = own_postgres_db
    argv = optimize_argv(short_space(tmp_path), url, "pgrestart", 1)
    driver = subprocess.Popen(
        argv, env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _wait_phase(box, driver, "scored")
    measure("postgres_restart_s", round(_pg_restart(), 2))
    out, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, out + err

    trials = optuna.load_study(study_name="pgrestart", storage=url).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE], [
        (t.state, t.user_attrs) for t in trials
    ]
    store = Store(url)
    try:
        assert store.trial_numbers("pgrestart") == [trials[0].number]
        assert len(store.workload_runs("pgrestart")) == 1
    finally:
        store.close()
    assert not box.servers()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MB tmpfs, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
            os.fsync(out.fileno())
    return filler


def test_full_disk_under_sqlite_is_one_clear_error_and_the_database_survives(
    small_disk: Path, tmp_path: Path, fake_box: Box
) -> None:
    box = fake_box
    db = small_disk / "study.db"
    url = f"sqlite:///{db}"
    argv = optimize_argv(short_space(tmp_path), url, "diskfull", 1)
    driver = subprocess.Popen(
        argv, env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    group = _wait_phase(box, driver, "scored")
    filler = _fill(small_disk)
    out, err = driver.communicate(timeout=900)
    # Ray and Optuna may print their own warnings on stderr; the error itself is one line.
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert wait_gone([group], 30) < 30
    assert driver.returncode == 2, out + err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: the storage failed: ") and "full" in lines[0], lines[0]

    filler.unlink()
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    engine.dispose()
    resumed = subprocess.run(argv, env=box.env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = optuna.load_study(study_name="diskfull", storage=url).get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 1, [(t.number, t.state, t.user_attrs) for t in trials]
    store = Store(url)
    try:
        assert store.trial_numbers("diskfull") == [done[0].number]
    finally:
        store.close()
    assert not box.servers()
