"""Ray side of the study: one actor per GPU slot, and a hub that carries progress both ways.

Workers evaluate candidates and return frozen `TrialResult`s; they never touch the database.
The hub is how the driver hears progress (for pruning and the display) and how it asks a
worker to stop a losing trial early.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, replace
from typing import Any

import ray

from tuner.study.evaluate import TrialRequest, TrialResult, evaluate
from tuner.workload import RunProgress

__all__ = ["ProgressHub", "TrialWorker", "start_workers"]


@ray.remote(num_cpus=0)
class ProgressHub:
    """Progress and state per trial, written by workers, read by the driver."""

    def __init__(self) -> None:
        self._progress: dict[int, dict[str, Any]] = {}
        self._state: dict[int, str] = {}
        self._stop: set[int] = set()

    def report(self, trial_number: int, progress: dict[str, Any]) -> None:
        self._progress[trial_number] = progress

    def set_state(self, trial_number: int, state: str) -> None:
        self._state[trial_number] = state

    def request_stop(self, trial_number: int) -> None:
        self._stop.add(trial_number)

    def should_stop(self, trial_number: int) -> bool:
        return trial_number in self._stop

    def snapshot(self) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
        return dict(self._progress), dict(self._state)

    def forget(self, trial_number: int) -> None:
        self._progress.pop(trial_number, None)
        self._state.pop(trial_number, None)
        self._stop.discard(trial_number)


class _TrialWorker:
    """Evaluates one trial at a time on the GPUs Ray gave this actor."""

    def __init__(self, hub: Any) -> None:
        self._hub = hub

    def run(self, request: TrialRequest) -> TrialResult:
        n = request.trial_number
        hub = self._hub
        stop = threading.Event()
        done = threading.Event()

        def poll_stop() -> None:
            # Asking the hub from the workload's event loop would block it; a thread keeps the
            # answer in an Event that `should_stop` reads for free.
            while not done.wait(1.0):
                if ray.get(hub.should_stop.remote(n)):
                    stop.set()
                    return

        poller = threading.Thread(target=poll_stop, daemon=True)
        poller.start()
        gpu_ids = tuple(int(g) for g in ray.get_gpu_ids())
        if gpu_ids and not request.gpu_ids:
            request = _with_gpus(request, gpu_ids)

        def on_progress(progress: RunProgress) -> None:
            hub.report.remote(n, asdict(progress))

        try:
            return evaluate(
                request,
                on_state=lambda s: hub.set_state.remote(n, s),
                on_progress=on_progress,
                should_stop=stop.is_set,
            )
        finally:
            done.set()


def _with_gpus(request: TrialRequest, gpu_ids: tuple[int, ...]) -> TrialRequest:
    # The server gets exactly this slot's GPUs, written into its spec so the start record
    # shows which ones it had.
    visible = ",".join(str(g) for g in gpu_ids)
    spec = request.spec.replace(env={**request.spec.env, "CUDA_VISIBLE_DEVICES": visible})
    return replace(request, gpu_ids=gpu_ids, spec=spec)


TrialWorker = ray.remote(_TrialWorker)


def start_workers(hub: Any, *, slots: int, gpus_per_slot: int) -> list[Any]:
    """One actor per slot; on CPU presets the slots reserve no GPU."""
    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1}
    if gpus_per_slot > 0:
        options["num_gpus"] = gpus_per_slot
    return [TrialWorker.options(**options).remote(hub) for _ in range(slots)]
