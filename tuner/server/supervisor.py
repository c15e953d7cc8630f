"""The leader of a server's process group: runs vLLM, and takes the group down with its owner.

A tuner process killed with SIGKILL runs no cleanup, and vLLM's API server, engine core and
workers would live on (holding gigabytes, a GPU's memory on a GPU) until the next run reaps
them. `Launcher` therefore starts this small program in a new session instead of vLLM itself:

1. Remember the parent (the tuner process that launched us) and start the server command as a
   child in our process group, so the group is still the server's.
2. Every 0.2 s, look whether the parent is gone (we were re-parented). If so: SIGTERM the whole
   group, SIGKILL what is left after the grace period, and exit.
3. When the server exits, exit with its status (a signal death is re-raised on ourselves), so
   the launcher reads vLLM's own exit status.
4. SIGTERM/SIGINT (the launcher's `stop()` signals every member of the group): wait for the
   server to finish its own shutdown, then exit as in 3.

Why polling and not `PR_SET_PDEATHSIG` on ourselves: the kernel sends that signal when the
parent *thread* that forked us exits, and `launch()` may run on a short-lived thread (a Ray
actor's executor), which would kill a healthy server. The server child does get
`PR_SET_PDEATHSIG` (SIGTERM) pointing at us: this process has one thread, and if it is killed
(OOM killer, a stray SIGKILL) the server still learns it.

Ray SIGKILLs the direct children of a worker process that dies, which the supervisor is (seen
on the CPU build: the API server and engine core outlived a SIGKILLed driver). So the supervisor
forks a watcher into the group, a grandchild of the owner that Ray leaves alone, which polls the
owner's pid and start time and takes the group down when it is gone.

Standard library only, run by path (`python -S supervisor.py`), so it adds milliseconds to a
start. Usage: `python -S supervisor.py GRACE_S -- ARGV...`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

_POLL_S = 0.2
# The niceness of the tuner driver that started the local Ray (set by the driver).
DRIVER_NICE_ENV = "TUNER_DRIVER_NICE"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the server child between fork and exec.
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # we died before prctl took effect
        os._exit(1)


def _driver_niceness() -> None:
    # Ray starts its workers at niceness 15, which the server would inherit; the driver records
    # its own niceness in DRIVER_NICE_ENV before it starts a local Ray, and the server (our
    # child, which inherits ours) runs at that instead. Lowering niceness needs CAP_SYS_NICE
    # (root has it); without it the server stays where it was, and its log says so.
    target = os.environ.get(DRIVER_NICE_ENV)
    if target is None or not target.lstrip("-").isdigit():
        return
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if int(target) >= current:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, int(target))
    except OSError as exc:
        sys.stderr.write(
            f"tuner supervisor: the server stays at niceness {current}, not the driver's "
            f"{target} ({exc})\n"
        )


def _others_in_group(pgid: int, me: int) -> list[int]:
    members: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                raw = stat.read()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _take_group_down(grace_s: float) -> None:
    """SIGTERM every other member of our group, SIGKILL the rest after `grace_s`."""
    me, pgid = os.getpid(), os.getpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # killpg reaches us too
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _others_in_group(pgid, me) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in _others_in_group(pgid, me):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _exit_like(status: int) -> None:
    """Exit with the child's status: its code, or the signal that killed it."""
    if status < 0:
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # these have no handler to reset
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        time.sleep(1.0)  # the signal is delivered before this ends
        sys.exit(128 - status)
    sys.exit(status)


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            raw = stat.read()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return None if fields[0] == "Z" else fields[19]


def _fork_watcher(owner: int, grace_s: float) -> None:
    """A second watcher in the group, a grandchild of the owner: it outlives us if we are killed.

    Ray SIGKILLs the direct children of a worker process that dies, which is us; the server
    (our child) would then live on. The watcher polls the owner itself (pid and start time) and
    takes the group down when it is gone. A stop of the group (SIGTERM) ends it like the rest.
    """
    ticks = _start_ticks(owner)
    if os.getpgrp() != os.getpid():
        return  # not the leader of a group of our own (run by hand): no group to guard
    if os.fork() != 0:
        return
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while _start_ticks(owner) == ticks and ticks is not None:
            if not _others_in_group(os.getpgrp(), os.getpid()):
                os._exit(0)  # the server group is gone: nothing left to watch
            time.sleep(_POLL_S)
        sys.stderr.write(
            f"tuner supervisor: the tuner process {owner} is gone; stopping the server\n"
        )
        _take_group_down(grace_s)
    finally:
        os._exit(0)


def main(argv: list[str]) -> None:
    """Run `argv` after `GRACE_S --` as our child; see the module docstring."""
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: supervisor.py GRACE_S -- ARGV...\n")
        sys.exit(2)
    grace_s = float(argv[0])
    parent = os.getppid()
    stopping = False
    _driver_niceness()  # the whole group: the watcher, this process and the server
    _fork_watcher(parent, grace_s)

    def on_stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True  # the child got the same signal from the group kill

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    try:
        child = subprocess.Popen(argv[2:], preexec_fn=_die_with_parent)
    except OSError as exc:
        sys.stderr.write(f"cannot start {argv[2]}: {exc}\n")
        sys.exit(127)
    while True:
        try:
            status = child.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            if not stopping and os.getppid() != parent:
                sys.stderr.write(
                    f"tuner supervisor: the tuner process {parent} is gone; stopping the server\n"
                )
                _take_group_down(grace_s)
                sys.exit(137)
            continue
        _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
