"""Ending a trial on an interrupt: a watcher thread that stops the trial's server at once.

The study's Ctrl-C or SIGTERM reaches a worker as a flag (`should_abort`); `AbortWatch` looks at
it several times a second and stops the server the trial has attached, so whatever request the
trial's own thread is blocked in fails at once; `AbortWatch.check()` then raises `Aborted`,
which `tuner.study.trial.evaluate.evaluate` turns into an interrupted trial.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from tuner.errors import TunerError
from tuner.server.handle import ServerHandle

__all__ = ["AbortWatch", "Aborted"]

# How often the abort watcher looks at `should_abort` (a flag the worker keeps).
_ABORT_POLL_S = 0.1


class Aborted(Exception):
    """The trial was told to abort: whatever it was doing is abandoned."""


class AbortWatch:
    """Stops the trial's server as soon as `should_abort` says so, from a thread of its own.

    The trial's own thread may be blocked in a request that takes a minute on a slow CPU (a
    calibration prefill, an agent's step, the probe's answers); stopping the server under it
    makes that request fail at once, and `check()` turns what follows into `Aborted`.
    """

    def __init__(self, should_abort: Callable[[], bool] | None) -> None:
        self._should_abort = should_abort
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._handle: ServerHandle | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if should_abort is not None:
            self._thread = threading.Thread(target=self._watch, name="abort-watch", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        assert self._should_abort is not None
        while not self._done.wait(_ABORT_POLL_S):
            if self._should_abort():
                self.fired.set()
                with self._lock:
                    handle = self._handle
                if handle is not None:
                    _stop_quietly(handle)
                return

    def aborted(self) -> bool:
        """Whether the trial was told to abort (looked at now, not at the watcher's next poll)."""
        if not self.fired.is_set() and self._should_abort is not None and self._should_abort():
            self.fired.set()
        return self.fired.is_set()

    def check(self) -> None:
        """Raise `Aborted` once the trial was told to abort."""
        if self.aborted():
            raise Aborted()

    def attach(self, handle: ServerHandle | None) -> None:
        """The server to stop on abort (None: the trial has none now)."""
        with self._lock:
            self._handle = handle
        if handle is not None and self.aborted():  # fired before it had a server to stop
            _stop_quietly(handle)

    def close(self) -> None:
        """Stop watching (the trial is over)."""
        self._done.set()


def _stop_quietly(handle: ServerHandle) -> None:
    # A survivor of SIGKILL is the reaper's to find; the abort itself must not raise here.
    with contextlib.suppress(TunerError):
        handle.stop_now()
