"""What Ctrl-C and SIGTERM do to a running study, from the signal to exit status 130.

SIGTERM before the loop runs raises `Interrupted` (a KeyboardInterrupt, as Ctrl-C). Once the
loop runs, the first signal asks it to stop (`stop_loop`): from then on the `SizingBackend`
holds back what trials return; the driver says the one line of what stops and how to resume
(`say_interrupted`), aborts the running trials and stops any server group left
(`stop_my_servers`). A second Ctrl-C quits at once (`quit_now`): it kills this run's server
groups and every process this one started, and exits 130.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from tuner.results.configs import describe_config_short
from tuner.server.handle import ABORT_GRACE_S
from tuner.server.reaper import descendants, kill_group, live_records
from tuner.study.search.loop import StudyLoop
from tuner.study.search.progress import interrupted_line
from tuner.study.search.ray_session import ray_temp_dir
from tuner.study.search.sizing_backend import SizingBackend

__all__ = [
    "Interrupted",
    "quit_now",
    "raise_interrupt",
    "say_interrupted",
    "stop_loop",
    "stop_my_servers",
]


class Interrupted(KeyboardInterrupt):
    """SIGTERM before the loop runs (Ray starting, the study opening): a KeyboardInterrupt, so
    the CLI says how to resume and exits 130 as for Ctrl-C, and no `except Exception` on the
    way swallows it."""


def raise_interrupt(_signum: int, _frame: object) -> None:
    raise Interrupted()


def stop_loop(loop: StudyLoop, backend: SizingBackend) -> Callable[[int, object], None]:
    """A handler that asks the loop to stop: an exception raised inside Ray's C++ `wait`
    surfaces as a SystemError and skips the clean stop, so the loop raises it itself. From
    this moment the backend holds back what trials return: nothing measured after the signal
    is stored."""

    def handler(_signum: int, _frame: object) -> None:
        backend.interrupted = True
        loop.stop_requested = True

    return handler


def stop_my_servers(cache_dir: Path) -> None:
    """Stop the server groups this process tree still owns after an interrupt's abort.

    None, normally: each worker stopped its own. A worker killed for not stopping in time
    leaves its group to its supervisor (a grace of seconds more); this does it now.
    """
    mine = {os.getpid(), *descendants(os.getpid())}
    for record in live_records(cache_dir / "run"):
        if record.owner_pid in mine:
            kill_group(record.pgid, grace_s=ABORT_GRACE_S, since_ticks=record.start_ticks)


def say_interrupted(loop: StudyLoop, resume_command: str | None) -> None:
    """The one line of a Ctrl-C: what stops, that it is re-queued, the command that resumes."""
    trials = [
        (n, dict(run.trial.user_attrs), describe_config_short(dict(run.trial.params)))
        for n, run in sorted(loop.inflight.items())
    ]
    resume = resume_command or "the same command"
    print(interrupted_line(trials, resume), file=sys.stderr, flush=True)


def quit_now(cache_dir: Path) -> Callable[[int, object], None]:
    """The second Ctrl-C's handler: no waiting for trials to stop at a task boundary.

    Kills the server groups this process tree started (their pid files under the cache name
    the owner), then every process this one started (Ray's workers and daemons), removes Ray's
    temp dir, and exits 130 at once.
    """

    def handler(_signum: int, _frame: object) -> None:
        mine = {os.getpid(), *descendants(os.getpid())}
        for record in live_records(cache_dir / "run"):
            if record.owner_pid in mine:
                kill_group(record.pgid, grace_s=0.0, since_ticks=record.start_ticks)
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        temp = ray_temp_dir()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        os._exit(130)

    return handler
