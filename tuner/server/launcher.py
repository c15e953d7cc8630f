"""Start a vLLM server, wait until it is ready, hand back a handle; stop it leaving nothing behind.

The lifecycle, in phases:

1. reap: a new `Launcher` first stops server groups left by tuner processes that died.
2. launch: `Popen` in a new session (its own process group) under `supervisor.py`, which takes
   the group down within seconds if this process dies (even by SIGKILL); output goes to a log
   file per start, the group is recorded in a pid file. The server runs in a working directory
   of the launcher's own (`work_dir`), never in the caller's: a directory that was removed or
   replaced under a long study (a synced copy of a repository, a temporary checkout) would
   otherwise make every later vLLM die at start on `getcwd()`. Relative paths in the command
   (the vLLM program, a local model) are made absolute against the caller's directory first.
3. wait: poll `GET /health` while watching the process. Exit before 200, or no 200 within
   the timeout, is a `StartupFailed` carrying the classified failure; the group is stopped.
   Meanwhile `on_wait` (when given) hears, every `PHASE_EVERY_S`, the seconds so far and the
   start-up phase the log shows last (`startup_phase`: loading weights, compiling, ...), so a
   start of several minutes on a slow CPU is not silent.
4. ready: read the startup facts from the log and from /metrics, return a `ServerHandle`.
5. stop: SIGTERM to the group, SIGKILL after the grace period, then confirm that no process of
   the group remains and that the port can be bound again; the pid file is removed. The
   handle and its stop are in `tuner.server.handle`; the log's start-up phases (step 3) are
   read by `tuner.server.startup_log`.

Interrupts (Ctrl-C) and exceptions during any phase stop the group before propagating. A caller
that is told to give up (a study's Ctrl-C or SIGTERM reaches a worker as a flag, not as a
signal) passes `should_abort` to `launch`: the wait looks at it every poll, stops the group with
`ABORT_GRACE_S` and raises `StartAborted`; once the server is ready, `ServerHandle.stop_now`
(safe from another thread) stops it as quickly, which makes every request in flight fail at once.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

import httpx

from tuner.errors import ServerError
from tuner.server.compile_cache import cache_root, server_env
from tuner.server.facts import merge_facts, parse_cache_info, parse_log
from tuner.server.failures import FailureKind, StartupFailed, classify
from tuner.server.handle import ServerHandle, stop_group
from tuner.server.reaper import PidRecord, port_free, reap_orphans, register, start_ticks
from tuner.server.spec import ServerSpec
from tuner.server.startup_log import log_tail, startup_phase
from tuner.settings import LaunchCommand, get_settings

__all__ = [
    "NOT_INHERITED",
    "PHASE_EVERY_S",
    "Launcher",
    "StartAborted",
    "WaitCallback",
    "free_port",
    "inherited_env",
]

_POLL_S = 0.2
_counter = itertools.count()
_PORT_RETRIES = 2
_PORT_TAKEN = "Address already in use"
# Run by path with -S: the supervisor imports only the standard library (see its docstring).
_SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
# Inherited variables a server does not get (a spec's own `env` may still set them).
# ARCTIC_INFERENCE_ENABLED=1 turns on arctic-inference's general vLLM plugin, installed with the
# package that suffix decoding needs: it refuses any platform but CUDA and patches only the vLLM
# it targets (0.26), so one left in a shell fails every start of the CPU build; elsewhere it
# would change the server behind the exported command's back (docs/vllm-facts.md, "Suffix
# decoding").
NOT_INHERITED = ("ARCTIC_INFERENCE_ENABLED",)


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of `environ` a server inherits: all of it but `NOT_INHERITED`."""
    return {name: value for name, value in environ.items() if name not in NOT_INHERITED}


# Seconds the supervisor gives the group after SIGTERM when its owner died; vLLM's API server,
# engine core and workers exit in 1-3 s on SIGTERM on the CPU build.
ORPHAN_GRACE_S = 5.0
# How often `on_wait` hears how a start is going (it reads the log's tail each time).
PHASE_EVERY_S = 1.0
# Called while a server starts: seconds since launch, and its last start-up phase (None: the
# log names none yet).
WaitCallback = Callable[[float, "str | None"], None]


class StartAborted(ServerError):
    """The caller gave up on a start (`launch(should_abort=...)`); the group is stopped."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _absolute_program(launch: LaunchCommand) -> LaunchCommand:
    """`launch` with a relative program path (`./venv/bin/vllm`) made absolute.

    The server runs in the launcher's `work_dir`, where a path relative to the caller's
    directory would name nothing; a bare name (`vllm`) is looked up on PATH and stays as it is.
    """
    program = launch.argv[0]
    if os.sep not in program or os.path.isabs(program):
        return launch
    return LaunchCommand((os.path.abspath(program), *launch.argv[1:]))


def _cwd() -> Path | None:
    try:
        return Path.cwd()
    except FileNotFoundError:  # removed under us
        return None


class Launcher:
    """Starts servers from `ServerSpec`s; one launcher may start many servers, one at a time."""

    def __init__(
        self,
        *,
        log_dir: Path | None = None,
        state_dir: Path | None = None,
        work_dir: Path | None = None,
        launch_command: LaunchCommand | None = None,
        poll_s: float = _POLL_S,
        cache_dir: Path | None = None,
    ) -> None:
        settings = get_settings()
        cache = cache_dir if cache_dir is not None else settings.cache_path()
        # Absolute now, while the caller's directory exists: the servers run in work_dir.
        self.log_dir = (log_dir if log_dir is not None else cache / "logs").absolute()
        self.state_dir = (state_dir if state_dir is not None else cache / "run").absolute()
        self.work_dir = (work_dir if work_dir is not None else cache / "work").absolute()
        self.launch_command = _absolute_program(launch_command or settings.launch_command())
        # vLLM's compile cache for this install, under tuner's cache (compile_cache.py).
        self.compile_root = cache_root(cache.absolute(), self.launch_command)
        # Where relative model paths were meant from (None: the caller's directory is gone).
        self._origin = _cwd()
        self.poll_s = poll_s
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.reaped = reap_orphans(self.state_dir)

    def _absolute_model(self, spec: ServerSpec) -> ServerSpec:
        # A local checkpoint named relative to the caller's directory, by its absolute path;
        # a hub id (`org/name`) names no such directory and is passed as it is.
        model = Path(spec.model)
        if self._origin is None or model.is_absolute() or not (self._origin / model).exists():
            return spec
        return spec.replace(model=str(self._origin / model))

    def _log_path(self, port: int, attempt: int) -> Path:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return self.log_dir / f"vllm-{stamp}-{os.getpid()}-{next(_counter)}-p{port}-a{attempt}.log"

    def launch(
        self,
        spec: ServerSpec,
        *,
        timeout_s: float = 900.0,
        attempt: int = 0,
        on_wait: WaitCallback | None = None,
        should_abort: Callable[[], bool] | None = None,
    ) -> ServerHandle:
        """Start `spec` and wait until `/health` answers 200.

        Args:
            spec: The server to start.
            timeout_s: Seconds to wait for readiness before giving up (`startup_timeout`).
            attempt: Retry number for this trial, stored with the start record.
            on_wait: Told every `PHASE_EVERY_S` while the server starts: seconds so far and
                `startup_phase` of its log.
            should_abort: Asked at every poll; True stops the group (`ABORT_GRACE_S`) and
                raises `StartAborted` (an interrupted study gives up a start in seconds).

        Returns:
            A handle to the ready server (also a context manager that stops it).

        Raises:
            StartupFailed: The server exited or timed out before it was ready; the group is
                stopped and `exc.failure` says why.
            StartAborted: `should_abort` said so; the group is stopped.
            ServerError: `spec.port` is already in use.
        """
        # A port we picked can be taken by someone else before vLLM binds it (several workers
        # on one host); then vLLM exits at once and another free port is tried.
        for retry in range(_PORT_RETRIES + 1):
            try:
                return self._start(
                    spec,
                    timeout_s=timeout_s,
                    attempt=attempt,
                    on_wait=on_wait,
                    should_abort=should_abort,
                )
            except StartupFailed as exc:
                failure = exc.failure
                lost_port = _PORT_TAKEN in failure.excerpt or _PORT_TAKEN in failure.message
                if spec.port is not None or not lost_port or retry == _PORT_RETRIES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _start(
        self,
        spec: ServerSpec,
        *,
        timeout_s: float,
        attempt: int,
        on_wait: WaitCallback | None,
        should_abort: Callable[[], bool] | None = None,
    ) -> ServerHandle:
        if spec.port is not None and not port_free(spec.host, spec.port):
            # Another server there would answer our /health polls before vLLM fails to bind.
            raise ServerError(f"port {spec.port} on {spec.host} is in use; free it or unset port")
        port = spec.port if spec.port is not None else free_port(spec.host)
        argv = self._absolute_model(spec).argv(self.launch_command, port)
        log_path = self._log_path(port, attempt)
        started_at = time.time()
        began = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)  # again: it may have been removed
        with open(log_path, "ab") as log:  # appends: group members share it
            process = subprocess.Popen(
                [sys.executable, "-S", _SUPERVISOR, str(ORPHAN_GRACE_S), "--", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=inherited_env(os.environ)
                | server_env(self.compile_root, os.environ)
                | spec.env,
                cwd=self.work_dir,
                start_new_session=True,
            )
        ticks = start_ticks(process.pid)
        try:
            pid_file = register(
                self.state_dir,
                PidRecord(
                    pid=process.pid,
                    pgid=process.pid,
                    port=port,
                    started_at=started_at,
                    start_ticks=ticks,
                    owner_pid=os.getpid(),
                    owner_start_ticks=start_ticks(os.getpid()),
                    log_path=str(log_path),
                ),
            )
        except BaseException:
            stop_group(process, ticks, grace_s=0.0)
            raise
        handle = ServerHandle(
            spec=spec,
            process=process,
            port=port,
            argv=argv,
            log_path=log_path,
            pid_file=pid_file,
            start_ticks=ticks,
            started_at=started_at,
            attempt=attempt,
        )
        try:
            ready, timed_out, metrics, ready_at = self._wait_ready(
                handle, process, began + timeout_s, on_wait, should_abort
            )
        except BaseException:
            handle._stop(2.0, check_port=False)
            raise
        if not ready and should_abort is not None and should_abort():
            handle.stop_now()
            raise StartAborted(
                f"the start was abandoned after {time.monotonic() - began:.1f} s "
                "(the run was interrupted); its server group is stopped",
                log_path=log_path,
            )
        if not ready:
            handle._stop(2.0, check_port=False)
            failure = classify(
                log_path.read_text(errors="replace"),
                process.returncode,
                timed_out,
                log_path=str(log_path),
            )
            if failure.kind is FailureKind.STARTUP_TIMEOUT:
                failure = failure.with_context(details={"timeout_s": timeout_s})
            raise StartupFailed(
                failure.with_context(
                    argv=tuple(argv),
                    env=dict(spec.env),
                    started_at=started_at,
                    ended_at=handle.ended_at,
                    exit_code=process.returncode if not timed_out else None,
                    attempt=attempt,
                )
            )
        handle.facts = merge_facts(
            parse_log(log_path.read_text(errors="replace")),
            parse_cache_info(metrics),
            startup_seconds=ready_at - began,
        )
        return handle

    def _wait_ready(
        self,
        handle: ServerHandle,
        process: subprocess.Popen[bytes],
        deadline: float,
        on_wait: WaitCallback | None = None,
        should_abort: Callable[[], bool] | None = None,
    ) -> tuple[bool, bool, str, float]:
        """Poll /health until 200 (ready), the process exits, the deadline passes, or
        `should_abort` says to give up (then not ready, not timed out)."""
        began = time.monotonic()
        told = float("-inf")
        with httpx.Client(base_url=handle.base_url, timeout=5.0) as client:
            while True:
                now = time.monotonic()
                if on_wait is not None and now - told >= PHASE_EVERY_S:
                    told = now
                    on_wait(now - began, startup_phase(log_tail(handle.log_path)))
                if process.poll() is not None or (should_abort is not None and should_abort()):
                    return False, False, "", 0.0
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass  # connections are refused while the engine builds
                if time.monotonic() > deadline:
                    return False, True, "", 0.0
                time.sleep(self.poll_s)
            ready_at = time.monotonic()
            try:
                metrics = client.get("/metrics").text
            except httpx.HTTPError:
                metrics = ""  # facts then come from the log alone
        return True, False, metrics, ready_at
