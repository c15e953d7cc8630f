"""A running vLLM server's handle: where it listens, what it became, and how to stop it.

`ServerHandle.stop` sends SIGTERM to the whole process group, SIGKILL after the grace period,
then confirms that no process of the group remains and that the port can be bound again, and
removes the pid file; `stop_now` does the same for an interrupt (a short grace, safe from any
thread). Handles not stopped by their owner are stopped at exit. `tuner.server.launcher`
starts the servers and hands these back.
"""

from __future__ import annotations

import atexit
import contextlib
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

from tuner.errors import ServerError
from tuner.records import ServerStartRecord, StartupFacts
from tuner.server.crashes import ServerDeath, server_death
from tuner.server.reaper import kill_group, port_free, unregister
from tuner.server.spec import ServerSpec

__all__ = ["ABORT_GRACE_S", "ServerHandle", "stop_group"]

# Seconds an aborted server (an interrupted study) gets after SIGTERM before SIGKILL: vLLM's CPU
# build exits in 1-3 s, and a study must be gone within 10 s of its signal (docs/guide.md), so
# a server busy compiling or loading weights is not waited for.
ABORT_GRACE_S = 3.0

# Handles not yet stopped (strong references: a dropped handle must still be stopped at exit).
_live: set[ServerHandle] = set()


class ServerHandle:
    """A running server: where it listens, what it became, and how to stop it."""

    def __init__(
        self,
        *,
        spec: ServerSpec,
        process: subprocess.Popen[bytes],
        port: int,
        argv: list[str],
        log_path: Path,
        pid_file: Path,
        start_ticks: int | None,
        started_at: float,
        attempt: int,
    ) -> None:
        self.spec = spec
        self.port = port
        self.argv = tuple(argv)
        self.log_path = log_path
        self.started_at = started_at
        self.attempt = attempt
        self.facts = StartupFacts()
        self.ended_at: float | None = None
        self.exit_status: int | None = None
        self._process = process
        self._pid_file = pid_file
        self._start_ticks = start_ticks
        self._stopped = False
        self._stopping = False  # a stop has begun (maybe on another thread)
        self._stop_lock = threading.Lock()
        _live.add(self)

    @property
    def pid(self) -> int:
        """The group leader (the supervisor of `vllm serve`), whose pid is the process group id."""
        return self._process.pid

    @property
    def base_url(self) -> str:
        """`http://host:port` (no trailing slash); the OpenAI API is under `/v1`."""
        return f"http://{self.spec.host}:{self.port}"

    @property
    def stopped(self) -> bool:
        """True once `stop()` has completed."""
        return self._stopped

    def alive(self) -> bool:
        """True while the main process runs and `stop()` has not been called."""
        return not self._stopped and self._process.poll() is None

    def death(self, answered_requests: int | None, *, wait_s: float = 5.0) -> ServerDeath | None:
        """Why the server died on its own (not stopped by us), or None while it still runs.

        Waits up to `wait_s` for the process to exit: a dropped connection can come first. A
        server that is being stopped (`stop_now` from another thread) did not die on its own.
        """
        if self._stopped or self._stopping:
            return None
        try:
            self._process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None
        return server_death(
            self.log_path.read_text(errors="replace"),
            self._process.returncode,
            answered_requests,
            log_path=str(self.log_path),
        )

    def record(self) -> ServerStartRecord:
        """The row the driver stores for this start."""
        return ServerStartRecord(
            argv=self.argv,
            env=dict(self.spec.env),
            log_path=str(self.log_path),
            attempt=self.attempt,
            started_at=self.started_at,
            ended_at=self.ended_at,
            exit_status=self.exit_status,
            facts=self.facts,
        )

    def stop(self, grace_s: float = 15.0) -> float:
        """Stop the whole process group and confirm it is gone; return the seconds it took.

        Idempotent. Raises `ServerError` if a process survives SIGKILL or the port stays bound.
        """
        return self._stop(grace_s, check_port=True)

    def stop_now(self, grace_s: float = ABORT_GRACE_S) -> float:
        """`stop` for an interrupt: a short grace, no wait for the port; safe from any thread.

        Requests in flight fail at once, so whatever the owner's thread was doing with the
        server ends; its own `stop()` then waits for this one and returns.
        """
        return self._stop(grace_s, check_port=False)

    def _stop(self, grace_s: float, *, check_port: bool) -> float:
        # One stop at a time: an interrupt may stop the server from another thread while the
        # owner's thread stops it too; the second waits for the first, then has nothing to do.
        self._stopping = True
        with self._stop_lock:
            return self._stop_locked(grace_s, check_port=check_port)

    def _stop_locked(self, grace_s: float, *, check_port: bool) -> float:
        # A start that failed may never have owned its port (someone else held it), so only
        # a server that became ready is required to leave its port bindable.
        if self._stopped:
            return 0.0
        began = time.monotonic()
        survivors = stop_group(self._process, self._start_ticks, grace_s)
        self.exit_status = self._process.returncode
        self.ended_at = time.time()
        self._stopped = True
        _live.discard(self)
        unregister(self._pid_file)
        if survivors:
            raise ServerError(
                f"server group {self.pid} still has processes {survivors} after SIGKILL",
                log_path=self.log_path,
            )
        deadline = time.monotonic() + 10.0
        while check_port and not port_free(self.spec.host, self.port):
            if time.monotonic() > deadline:
                raise ServerError(
                    f"port {self.port} is still bound after the server stopped",
                    log_path=self.log_path,
                )
            time.sleep(0.05)
        return time.monotonic() - began

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ServerHandle(pid={self.pid}, url={self.base_url!r}, log={str(self.log_path)!r})"


def stop_group(process: subprocess.Popen[bytes], ticks: int | None, grace_s: float) -> list[int]:
    try:
        survivors = kill_group(process.pid, grace_s=grace_s, since_ticks=ticks)
    except BaseException:
        # Interrupted while waiting for a graceful exit: do not leave the group behind.
        kill_group(process.pid, grace_s=0.0, since_ticks=ticks)
        raise
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5.0)
    return survivors


@atexit.register
def _stop_live_handles() -> None:
    # A handle not stopped by its owner (no context manager, an unhandled error) must not
    # outlive this process; the reaper covers the cases where atexit does not run (SIGKILL).
    for handle in list(_live):  # stop() removes each from the set
        with contextlib.suppress(Exception):
            handle.stop(grace_s=5.0)
