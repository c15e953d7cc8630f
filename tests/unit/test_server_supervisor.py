"""The group supervisor passes the server's exit status through and dies with its parent's death."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tuner.server.launcher import _SUPERVISOR
from tuner.server.reaper import group_members

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def _supervised(*argv: str) -> list[str]:
    return [sys.executable, "-S", _SUPERVISOR, "5", "--", *argv]


def test_exit_status_and_signal_death_are_the_servers() -> None:
    assert subprocess.run(_supervised(sys.executable, "-c", "raise SystemExit(3)")).returncode == 3
    killed = subprocess.run(
        _supervised(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)")
    )
    assert killed.returncode == -signal.SIGKILL


def test_a_command_that_cannot_start_is_exit_127_with_one_line() -> None:
    proc = subprocess.run(_supervised("/no/such/vllm"), capture_output=True, text=True)
    assert proc.returncode == 127
    assert proc.stderr.strip().startswith("cannot start /no/such/vllm:")


def test_the_group_goes_when_the_parent_dies_even_if_the_server_ignores_sigterm(
    tmp_path: Path,
) -> None:
    # The parent starts the supervisor in a new session, prints its pid, then is SIGKILLed.
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    parent = subprocess.Popen(
        [
            sys.executable, "-c",
            "import subprocess, sys, time; p = subprocess.Popen(sys.argv[1:], "
            "start_new_session=True); print(p.pid, flush=True); time.sleep(60)",
            *[a.replace("5", "1", 1) if a == "5" else a for a in _supervised(
                sys.executable, "-c", stubborn)],
        ],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert parent.stdout is not None
    pgid = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    while len(group_members(pgid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(pgid)) == 3  # supervisor, its watcher and the server
    parent.kill()
    parent.wait()
    parent.stdout.close()
    began = time.monotonic()
    while group_members(pgid) and time.monotonic() - began < 10:
        time.sleep(0.05)
    gone_s = time.monotonic() - began
    assert group_members(pgid) == []
    # SIGTERM ignored: the group outlives the 1 s grace and goes by SIGKILL. The upper bound
    # is the loop's: a timed bound fails on a loaded machine (benchmarks measure speed).
    assert gone_s >= 1.0


def test_the_group_goes_when_the_owner_kills_the_supervisor_and_dies() -> None:
    # What Ray does to a dying worker: SIGKILL its direct children (the supervisor), then die.
    # The server (a grandchild) must still go: the supervisor's forked watcher sees the owner go.
    owner = subprocess.Popen(
        [
            sys.executable, "-c",
            "import os, subprocess, sys, time; p = subprocess.Popen(sys.argv[1:], "
            "start_new_session=True); print(p.pid, flush=True); time.sleep(1.0); "
            "os.kill(p.pid, 9); os._exit(0)",
            # A server that ignores SIGTERM, as vLLM's API server did while it started.
            *_supervised(sys.executable, "-c", STUBBORN),
        ],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert owner.stdout is not None
    pgid = int(owner.stdout.readline())
    owner.wait()
    owner.stdout.close()
    began = time.monotonic()
    while group_members(pgid) and time.monotonic() - began < 15:
        time.sleep(0.05)
    assert group_members(pgid) == [], "the server outlived its killed supervisor and owner"
