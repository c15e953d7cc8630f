"""Helpers of the interrupt tests (issue 48): a driver's output with arrival times, a signal
sent at a moment the test chose, and the checks every interrupted run must pass.

Used by tests/integration/test_interrupt_fake.py (the fake server, every phase of a trial) and
tests/e2e/test_interrupt_real.py (the real CPU build: the server start and the calibration).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import psutil
from optuna.trial import TrialState

from tuner.attrs import StudyAttr, TrialAttr
from tuner.server.reaper import PidRecord, group_members, port_free
from tuner.storage import Store

STOPPED_WITHIN_S = 10.0  # issue 48: whatever the trial is doing


class Lines:
    """A subprocess's merged output read line by line, each with the time it arrived."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, pattern: str, timeout_s: float) -> float:
        """The arrival time of the first line matching `pattern`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if re.search(pattern, line):
                    return at
            if self.proc.poll() is not None and not self._thread.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matched {pattern!r}:\n{self.text()}")

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str]) -> Lines:
        """Start `argv` in a session of its own, output and errors merged, and read it."""
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        return cls(proc)

    def after(self, at: float) -> list[str]:
        """The lines that arrived at or after monotonic time `at`."""
        return [line for t, line in self.lines if t >= at]

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def join(self) -> None:
        self._thread.join(timeout=10)


@dataclass(frozen=True)
class Stopped:
    """What one interrupted run left: its exit, how long it took, its output, its leftovers."""

    code: int
    took_s: float
    out: Lines
    left: list[str]
    server: PidRecord
    signal_at: float


def left_alive(procs: list[psutil.Process], servers: list[PidRecord], by: float) -> list[str]:
    """What of `procs` and the server groups of `servers` is still alive at monotonic `by`."""
    with contextlib.suppress(psutil.Error):
        psutil.wait_procs(procs, timeout=max(0.0, by - time.monotonic()))
    while time.monotonic() < by and any(
        group_members(s.pgid, since_ticks=s.start_ticks) for s in servers
    ):
        time.sleep(0.1)
    alive = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
    for s in servers:
        members = group_members(s.pgid, since_ticks=s.start_ticks)
        alive.extend(f"server group {s.pgid}: {pid}" for pid in members)
    return alive


def interrupt(
    proc: subprocess.Popen[str], out: Lines, server: PidRecord, signum: int, *, group: bool
) -> Stopped:
    """Send `signum` to the driver (or its process group) now; wait for its exit, then for
    what it started to be gone, up to `STOPPED_WITHIN_S` after the signal."""
    tree = psutil.Process(proc.pid).children(recursive=True)
    signal_at = time.monotonic()
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = -1
    took = time.monotonic() - signal_at
    left = left_alive(tree, [server], signal_at + STOPPED_WITHIN_S)
    return Stopped(code, took, out, left, server, signal_at)


def check_interrupted(stopped: Stopped, name: str) -> None:
    """Exit 130 within 10 s, nothing left, one "interrupted" line, nothing said after it
    about a measurement (a calibration, an outcome)."""
    text = stopped.out.text()
    assert stopped.code == 130, (name, stopped.code, text)
    assert stopped.took_s < STOPPED_WITHIN_S, (name, stopped.took_s, text)
    assert not stopped.left, (name, stopped.left)
    assert port_free("127.0.0.1", stopped.server.port)
    said = [line for line in stopped.out.after(0.0) if line.startswith("interrupted: ")]
    assert len(said) == 1, text
    for line in stopped.out.after(stopped.signal_at):
        assert not re.search(r"calibrated on trial|\] trial \d+ .*(scored|pruned|failed)", line), (
            name,
            text,
        )


def check_requeued(url: str, study_name: str, interrupted: int) -> None:
    """`interrupted` trials FAIL "interrupted", each queued again once, the last copy still
    waiting; nothing stored: no workload row, no speeds calibrated on an interrupted server."""
    study = optuna.load_study(study_name=study_name, storage=url)
    trials = study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    assert states == [TrialState.FAIL] * interrupted + [TrialState.WAITING], trials
    for n, t in enumerate(trials[:interrupted]):
        assert t.user_attrs[TrialAttr.FAILURE_KIND] == "interrupted", t.user_attrs
        assert trials[n + 1].user_attrs[TrialAttr.REQUEUED_FROM] == t.number
    # The study's sizing decision may be stored before any server (e.g. "--no-calibrate"),
    # never speeds measured on a server the interrupt stopped.
    assert "prefill_tps" not in (study.user_attrs.get(StudyAttr.CALIBRATION) or {})
    store = Store(url)
    try:
        assert not store.workload_runs(study_name)
    finally:
        store.close()


def server_of(state_dir: Path) -> PidRecord:
    """The one server group recorded under `state_dir`."""
    from tuner.server.reaper import live_records

    records = live_records(state_dir)
    assert len(records) == 1, records
    return records[0]
