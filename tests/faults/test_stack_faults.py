"""Faults of what runs around the server: the Ray worker, Postgres, the driver in the
confirmation, the disk under SQLite.

- The Ray worker (the actor process that launched the server) SIGKILLed mid-trial: its server
  goes with it (the supervisor), the trial is re-queued once and measured by the worker's
  replacement (the loop waits for it to be placed).
- Postgres restarted (`pg_ctlcluster ... restart`) while a searched trial runs, during the
  confirmation's floor start and during the candidate's confirmation run: the driver waits each
  restart out (pooled connections pinged, refused connects retried) and finishes the study and
  its confirmation; nothing lost, nothing stored twice.
- The driver SIGTERMed during the candidate's confirmation run: exit 130 within 10 s, its
  server gone; the same `tuner optimize` run again searches nothing, finishes the stage, and
  each (config, round) is run and stored once.
- The disk under the SQLite file fills up while a trial runs: the driver stops with one clear
  line on stderr (exit 2), leaves no vLLM process, and once space is back the database opens,
  passes SQLite's integrity check, and the same command finishes the study.

Real Ray, the real Postgres server, a real tmpfs (root only), and the named fake vLLM server
(tuner/testing/fake_vllm.py, slowed to under a minute per trial): these faults are in the layers
around the server, which a real one would only make a minute slower per start; the real
server's own faults and its process group are tested in test_server_faults.py and
test_driver_kill.py. Only the worker kill, which strikes in the warm-up, runs one; the other
faults strike in the scored tasks, and their studies run without (`_space`).
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
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.faults.conftest import (
    Box,
    confirmation_runs,
    nth_server,
    optimize_argv,
    phase_of,
    short_space,
    wait_gone,
)
from tests.faults.tally import measure
from tuner.attrs import Role, StudyAttr, TrialAttr
from tuner.storage import Store

pytestmark = [pytest.mark.ray, pytest.mark.faults]


@pytest.fixture
def fake_box(box: Box) -> Box:
    """The box with the fake server in place of vLLM, logging its requests, slowed down."""
    env = {
        **box.env,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "FAKE_VLLM_ACCESS_LOG": "1",
        # Phases of seconds to hit (a 3-step task about 3 s, the correctness probe's 16 x 32
        # tokens about 15 s), and a trial well under a minute.
        "FAKE_VLLM_TOKEN_DELAY_S": "0.03",
    }
    return Box(box.cache, env)


def _space(tmp_path: Path, *, warmup: bool = False) -> Path:
    """`short_space` without the plain benchmark, which no fault here strikes (4 x 32 tokens of
    every trial at the token delay); with a warm-up only for a fault struck there."""
    return short_space(tmp_path, warmup=warmup, throughput_streams=[])


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
    argv = optimize_argv(_space(tmp_path, warmup=True), url, "workerkill", 1)
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


def _confirmed_study_checks(url: str, study: str, box: Box) -> list[FrozenTrial]:
    """A study of 2 searched trials confirmed `--confirm 1,1`: the baseline's floor start and
    the candidate's round 0, each run once and stored once; nothing left running."""
    trials = optuna.load_study(study_name=study, storage=url).get_trials()
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    searched = [t for t in trials if t.user_attrs.get(TrialAttr.ROLE) != Role.CONFIRM]
    measured = [t for t in searched if t.state == TrialState.COMPLETE]
    assert sorted(str(t.user_attrs[TrialAttr.ROLE]) for t in measured) == [
        "baseline",
        "candidate",
    ], [(t.number, t.state, t.user_attrs) for t in trials]
    base, cand = sorted(measured, key=lambda t: t.number)
    assert confirmation_runs(trials) == [(base.number, 0), (cand.number, 0)]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    store = Store(url)
    try:
        assert store.trial_numbers(study) == sorted(t.number for t in done)  # nothing twice
        assert len(store.workload_runs(study)) == len(done)
    finally:
        store.close()
    assert (
        optuna.load_study(study_name=study, storage=url).user_attrs.get(StudyAttr.CONFIRM_PENDING)
        is False
    )
    assert not box.servers()
    return trials


@pytest.mark.postgres
@pytest.mark.injects(3)  # in a searched trial, the floor start, the candidate's confirmation
def test_postgres_restarted_mid_study_and_in_the_confirmation_is_waited_out(
    own_postgres_db: str, tmp_path: Path, fake_box: Box
) -> None:
    box = fake_box
    url = own_postgres_db
    argv = optimize_argv(_space(tmp_path), url, "pgrestart", 2, confirm="1,1")
    driver = subprocess.Popen(
        argv, env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    def alive() -> None:
        assert driver.poll() is None, driver.communicate()[1][-3000:]

    restarts = []
    # Servers: 1 the baseline, 2 the candidate, 3 the floor start (the baseline's round 0),
    # 4 the candidate's round 0.
    for server in (1, 3, 4):
        nth_server(box, alive, server, "scored")
        restarts.append(round(_pg_restart(), 2))
    measure("postgres_restart_s", restarts)
    out, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, out + err

    trials = _confirmed_study_checks(url, "pgrestart", box)
    assert all(t.state == TrialState.COMPLETE for t in trials), [
        (t.number, t.state, t.user_attrs) for t in trials
    ]


def test_driver_sigtermed_in_the_confirmation_exits_130_and_the_rerun_resumes_it(
    tmp_path: Path, fake_box: Box
) -> None:
    box = fake_box
    url = f"sqlite:///{tmp_path / 'confirmterm.db'}"
    argv = optimize_argv(_space(tmp_path), url, "confirmterm", 2, confirm="1,1")
    driver = subprocess.Popen(
        argv, env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    def alive() -> None:
        assert driver.poll() is None, driver.communicate()[1][-3000:]

    # The 4th server: the candidate's confirmation run (after the floor start, the 3rd).
    group = nth_server(box, alive, 4, "scored")
    sent = time.monotonic()
    driver.send_signal(signal.SIGTERM)
    out, err = driver.communicate(timeout=60)
    exit_s = time.monotonic() - sent
    measure("confirmation_sigterm_exit_s", round(exit_s, 2))
    assert driver.returncode == 130, out + err
    assert exit_s <= 10.0, f"exited {exit_s:.1f} s after SIGTERM"
    assert wait_gone([group], 10) < 10
    study = optuna.load_study(study_name="confirmterm", storage=url)
    assert study.user_attrs[StudyAttr.CONFIRM_PENDING] is True
    (stopped,) = [t for t in study.get_trials() if t.state == TrialState.FAIL]
    assert stopped.user_attrs[TrialAttr.ROLE] == Role.CONFIRM, stopped.user_attrs
    assert stopped.user_attrs[TrialAttr.FAILURE_KIND] == "interrupted"
    searched = len([t for t in study.get_trials() if t.user_attrs[TrialAttr.ROLE] != "confirm"])

    resumed = subprocess.run(argv, env=box.env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = _confirmed_study_checks(url, "confirmterm", box)
    # The re-run searched nothing and re-ran the stopped run once, from its re-queued copy.
    assert searched == len([t for t in trials if t.user_attrs[TrialAttr.ROLE] != "confirm"])
    assert [t for t in trials if t.state == TrialState.FAIL] == [stopped]
    (copy,) = [t for t in trials if t.user_attrs.get(TrialAttr.REQUEUED_FROM) == stopped.number]
    assert copy.state == TrialState.COMPLETE
    assert copy.user_attrs[TrialAttr.CONFIRM_OF] == stopped.user_attrs[TrialAttr.CONFIRM_OF]


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
    argv = optimize_argv(_space(tmp_path), url, "diskfull", 1)
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
