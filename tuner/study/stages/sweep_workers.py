"""The load sweep's servers on the study's Ray workers: one request at a time, interruptible.

A sweep's configs are no Optuna trials (its rows live under the study name + ":load-sweep", its
result in one study attribute), so the study loop (`tuner.study.search.loop.StudyLoop`: ask,
tell, the budget, the trials' table) has nothing to do for them. What the loop's trials get
from the worker path, the sweep gets the same way: its requests go to the loop's backend,
`tuner.study.trial.workers.RayBackend` (one `TrialWorker` actor on one slot's hardware, calling
`tuner.study.trial.evaluate.evaluate`), one at a time: the loads are measured one config after
another, as they always were, so no two of the sweep's servers share a box.

Lifecycle of `SweepWorkers`:

1. Nothing starts until the first `run` (a sweep with every config stored starts no Ray).
2. The first `run` starts Ray when none runs (a private local instance, as the driver's, which
   puts the servers at the driver's niceness), and the slot's worker.
3. `run(request)` submits the request, says each state the worker reports (server starting,
   vLLM's start-up phase, "N agent(s)", ...) and returns its `TrialResult`. A worker that died
   (its node lost, killed) gets one more try on a fresh worker.
4. Ctrl-C or SIGTERM during a `run`: the worker's trial is aborted (its server stopped within
   seconds, `RayBackend.abort`), any server group left is stopped, and `KeyboardInterrupt` is
   raised: nothing of the interrupted config is stored, and the next sweep resumes with it. A
   second Ctrl-C quits at once (`tuner.study.search.interrupts.quit_now`).
5. Leaving the `with` block closes the worker, reaps orphaned servers and stops the Ray that
   step 2 started (a Ray the caller runs, e.g. `tuner optimize`'s, is left running).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from tuner.errors import StudyError
from tuner.server import reap_orphans
from tuner.study.search.interrupts import quit_now, stop_my_servers
from tuner.study.search.ray_session import start_ray, stop_ray
from tuner.study.trial.request import TrialRequest, TrialResult

__all__ = ["SweepWorkers"]

# How often `run` looks for the result, the worker's state and an interrupt.
_POLL_S: Final = 0.5


class SweepWorkers:
    """The sweep's one Ray slot (see the module docstring)."""

    def __init__(self, *, gpus_per_slot: int, cache_dir: Path) -> None:
        self._gpus = gpus_per_slot
        self._cache_dir = cache_dir
        self._backend: Any = None  # a RayBackend, from the first `run`
        self._ray_tmp: Path | None = None
        self._started_ray = False
        self._interrupted = threading.Event()
        self._handlers: dict[int, Any] = {}

    def __enter__(self) -> SweepWorkers:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._handlers[signum] = signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, _signum: int, _frame: object) -> None:
        # Raising here, inside Ray's C++ `wait`, would skip the abort (see
        # tuner.study.search.interrupts.stop_loop): `run` looks at the flag instead.
        self._interrupted.set()

    def _start(self) -> Any:
        if self._backend is None:
            import ray

            from tuner.study.trial.workers import RayBackend

            if not ray.is_initialized():
                self._ray_tmp = start_ray(None)
                self._started_ray = True
            self._backend = RayBackend(slots=1, gpus_per_slot=self._gpus)
        return self._backend

    def run(self, request: TrialRequest, on_state: Callable[[str], None]) -> TrialResult:
        """`request` evaluated on the slot's worker; its states said on `on_state` as they
        change. Raises `KeyboardInterrupt` once an interrupt has stopped it."""
        backend = self._start()
        for attempt in range(2):
            self._check()
            backend.submit(0, request)
            said: str | None = None
            while True:
                finished = backend.wait(_POLL_S)
                if self._interrupted.is_set():
                    self._abort(finished)
                if finished:
                    break
                progress = backend.progress().get(request.trial_number)
                if progress is not None and progress.state != said:
                    said = progress.state
                    on_state(said)
            (done,) = finished
            if done.result is not None:
                return done.result  # type: ignore[no-any-return]
            if attempt == 1:
                raise StudyError(
                    f"the load sweep's worker died twice: {done.crash}; "
                    "run tuner sweep again to resume"
                )
            on_state(f"the worker died ({done.crash}); once more on a fresh worker")
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _abort(self, finished: list[Any]) -> None:
        """Stop the running trial now (its server within seconds) and raise the interrupt."""
        if self._handling_signals():
            signal.signal(signal.SIGINT, quit_now(self._cache_dir))
        if not finished:
            self._backend.abort()
            while not self._backend.wait(_POLL_S):
                pass  # RayBackend.wait kills a worker that has not stopped in ABORT_WAIT_S
        stop_my_servers(self._cache_dir)
        raise KeyboardInterrupt()

    def _check(self) -> None:
        if self._interrupted.is_set():
            raise KeyboardInterrupt()

    def _handling_signals(self) -> bool:
        return bool(self._handlers) and threading.current_thread() is threading.main_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        if self._backend is not None:
            self._backend.close()
            # The slot's server stops with its trial; one a killed worker left, here.
            reap_orphans(self._cache_dir / "run")
        if self._started_ray:
            stop_ray(self._ray_tmp)
        if exc_type is None:
            self._check()  # an interrupt while the last config was being stored
