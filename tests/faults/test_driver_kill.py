"""SIGKILL the driver in every phase of a trial: its servers go with it, the study resumes.

One study, killed again and again, each time further along: while its vLLM server starts,
during the warm-up, during the scored tasks, during the plain benchmark, between storing a
result and telling Optuna, and during the confirmation stage. After every kill, before anything
else runs, the killed driver's server group (API server, engine core, worker) must be gone and
its port free within seconds: the group's supervisor does it, not the next run. The last run
then finishes the study: the baseline, one candidate and their two confirmation runs, every
interrupted trial re-queued once, nothing stored twice.

Real vLLM CPU (SmolLM2, eager), real Ray, a SQLite file; 10 server starts in 8 commands.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.faults.conftest import Box, optimize_argv, phase_of, short_space, wait_gone
from tests.faults.tally import measure
from tuner.attrs import TrialAttr
from tuner.server.reaper import group_members
from tuner.storage import Store

pytestmark = [pytest.mark.vllm, pytest.mark.faults]

GONE_WITHIN_S = 15.0  # supervisor poll 0.2 s + SIGTERM grace 5 s + vLLM's own exit


def _wait_for_phase(box: Box, driver: subprocess.Popen[bytes], phase: str) -> dict[str, int]:
    """The server group once the newest server reaches `phase` (the driver still alive)."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        assert driver.poll() is None, f"the driver ended before phase {phase}"
        servers = box.servers()
        logs = box.logs()
        if servers and logs:
            group = max(servers, key=lambda s: s["started_at"])
            log = Path(str(group["log_path"]))
            if phase == "starting":
                # The engine core and its worker exist: the processes that outlived drivers.
                if len(group_members(group["pgid"])) >= 4 and phase_of(log) == "starting":
                    return group
            elif phase_of(log) == phase:
                return group
        time.sleep(0.2)
    raise AssertionError(f"phase {phase} not reached in time")


def _ray_processes() -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"raylet" in cmd or b"gcs_server" in cmd or b"dashboard_agent" in cmd:
                out.add(int(entry.name))
    return out


def _ray_left_after(before: set[int], seconds: float) -> int:
    """New Ray processes still alive `seconds` after now (0 once none is, however early)."""
    deadline = time.monotonic() + seconds
    while True:
        left = len(_ray_processes() - before)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def _kill_in(box: Box, argv: list[str], phase: str) -> tuple[float, dict[str, int]]:
    driver = subprocess.Popen(argv, env=box.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        group = _wait_for_phase(box, driver, phase)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        if driver.stderr is not None:
            driver.stderr.close()
    return wait_gone([group], 60.0), group


@pytest.mark.injects(6)  # four phases of a trial, after storing, in the confirmation
def test_driver_killed_in_every_phase(tmp_path: Path, box: Box) -> None:
    space = short_space(tmp_path)
    url = f"sqlite:///{tmp_path / 'phases.db'}"
    # Two trials, the baseline and one candidate: confirmation pairs candidates with the
    # baseline, and a study with only its baseline queues no confirmation run. The first run
    # sets that target and every later one continues it (a killed run never reaches it), so the
    # run after the kills measures both.
    argv = optimize_argv(space, url, "phases", 2)
    seconds: dict[str, float] = {}
    ray_left: dict[str, int] = {}
    for phase in ("starting", "warmup", "scored", "benchmark"):
        ray_before = _ray_processes()
        gone_s, group = _kill_in(box, argv, phase)
        # Ray's own processes: reported (the driver's side), not asserted here; counted 10 s
        # after the kill, or as 0 as soon as none is left.
        ray_left[phase] = _ray_left_after(ray_before, 10.0)
        seconds[phase] = round(gone_s, 2)
        assert gone_s < GONE_WITHIN_S, f"killed in {phase}: {group} still there after {gone_s} s"

    # Between storing the result and telling Optuna (the driver's own test hook).
    servers_before = {s["pgid"] for s in box.servers()}
    killed = subprocess.run(
        argv, env={**box.env, "TUNER_TEST_SIGKILL_AT": "stored"}, capture_output=True, timeout=900
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    stored_groups = [s for s in box.servers() if s["pgid"] not in servers_before]
    seconds["stored"] = round(wait_gone(stored_groups, 60.0), 2)  # stopped before storing
    assert seconds["stored"] < GONE_WITHIN_S, f"killed after storing: {stored_groups} still there"

    resumed = subprocess.run(argv, env=box.env, capture_output=True, text=True, timeout=1800)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    # Confirmation: the candidate and the baseline once more, killed while the first works,
    # then finished.
    confirm = [
        sys.executable, "-m", "tuner.cli", "confirm", "--study", "phases", "--storage", url,
        "--confirm", "1,1",
    ]  # fmt: skip
    gone_s, _group = _kill_in(box, confirm, "scored")
    seconds["confirmation"] = round(gone_s, 2)
    assert gone_s < GONE_WITHIN_S
    finished = subprocess.run(confirm, env=box.env, capture_output=True, text=True, timeout=900)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    measure("driver_kill_gone_s", seconds)
    measure("ray_processes_left_10s_after_kill", ray_left)

    study = optuna.load_study(study_name="phases", storage=url)
    trials = study.get_trials()
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    role = TrialAttr.ROLE
    measured = [
        t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs[role] != "confirm"
    ]
    confirms = [
        t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs[role] == "confirm"
    ]
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert sorted(t.user_attrs[role] for t in measured) == ["baseline", "candidate"]
    assert len(confirms) == 2
    # Six kills: four in the trial's phases, one after storing, one in the confirmation.
    assert len(interrupted) == 6, [(t.number, t.user_attrs) for t in trials]
    assert {t.user_attrs.get(TrialAttr.FAILURE_KIND) for t in interrupted} == {"interrupted"}
    # Each interrupted trial was re-queued exactly once: a chain, no fork, no loss.
    requeued = [t.user_attrs.get(TrialAttr.REQUEUED_FROM) for t in trials]
    sources = [n for n in requeued if n is not None]
    assert sorted(sources) == sorted(t.number for t in interrupted)
    store = Store(url)
    try:
        kept = sorted(store.trial_numbers("phases"))
        assert kept == sorted(t.number for t in measured + confirms)  # nothing stored twice
        assert len(store.workload_runs("phases")) == 4
    finally:
        store.close()
    assert not box.servers()
