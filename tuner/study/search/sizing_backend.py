"""The backend the driver runs the study loop on: the Ray backend, with the study's first
calibration stored as soon as its trial returns, and the interrupt's gate on what comes back.

`SizingBackend` wraps any `TrialBackend`; `tuner.study.search.interrupts` sets its
`interrupted` flag when a signal arrives and calls its `abort`.
"""

from __future__ import annotations

from collections.abc import Callable

import optuna

from tuner.study.preflight.plan import WorkloadSizing
from tuner.study.trial.backend import Finished, Progress, TrialBackend
from tuner.study.trial.request import TrialRequest

__all__ = ["SizingBackend"]


class SizingBackend:
    """The backend, with the study's first calibration stored as soon as its trial returns.

    The calibration is written (with the preset's workload replaced by the chosen one) before
    the loop records that trial, so no trial is requested, and no driver resumes, without it.

    Also the interrupt's gate: once `interrupted` is set (by the signal handler), `wait` hands
    the loop no trial and stores no calibration; after `abort` it hands back every trial that
    returned, as a result-less `Finished` the loop's `abandon` only counts as back.
    """

    def __init__(
        self,
        backend: TrialBackend,
        study: optuna.Study,
        sizing: WorkloadSizing,
        say: Callable[[str], None],
    ) -> None:
        self._backend, self._study, self._sizing, self._say = backend, study, sizing, say
        self.interrupted = False
        self._aborted = False
        self._held: list[Finished] = []

    @property
    def slots(self) -> int:
        """The wrapped backend's."""
        return self._backend.slots

    def ready(self, slot: int) -> bool:
        """The wrapped backend's: a wrapper that answered for it would start trials on slots
        that cannot run them (a lost node's replacement worker, not placed yet)."""
        return self._backend.ready(slot)

    def submit(self, slot: int, request: TrialRequest) -> None:
        """Start `request` on the wrapped backend."""
        self._backend.submit(slot, request)

    def wait(self, timeout_s: float) -> list[Finished]:
        """The wrapped backend's finished trials, after storing a calibration one carries."""
        finished = self._backend.wait(timeout_s)
        if self.interrupted:
            # Measured after the signal, or racing it: never stored (the trial runs again).
            self._held.extend(finished)
            if not self._aborted:
                return []
            back = [
                Finished(f.slot, f.trial_number, None, crash="interrupted", node_id=f.node_id)
                for f in self._held
            ]
            self._held.clear()
            return back
        for f in finished:
            if f.result is not None and f.result.calibration is not None:
                self._sizing.record(self._study, f.result.calibration, self._say)
        return finished

    def abort(self) -> None:
        """Stop every running trial now (the wrapped backend's `abort`, where it has one)."""
        self.interrupted = self._aborted = True
        abort = getattr(self._backend, "abort", None)
        if abort is not None:
            abort()

    def progress(self) -> dict[int, Progress]:
        """The wrapped backend's."""
        return self._backend.progress()

    def request_stop(self, trial_number: int) -> None:
        """Ask the wrapped backend."""
        self._backend.request_stop(trial_number)

    def now(self) -> float:
        """The wrapped backend's clock."""
        return self._backend.now()

    def close(self) -> None:
        """Close the wrapped backend."""
        self._backend.close()
