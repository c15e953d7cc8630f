"""Ray side of the study: one actor per GPU slot, and a hub that carries progress both ways.

Workers evaluate candidates and return frozen `TrialResult`s; they never touch the database.
The hub is how the driver hears progress (for pruning and the display) and how it asks a
worker to stop a losing trial early. `RayBackend` wraps both as the study loop's
`tuner.study.trial.backend.TrialBackend`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, replace
from typing import Any

import ray

from tuner.study.trial.backend import Finished, Progress
from tuner.study.trial.evaluate import TrialRequest, TrialResult, evaluate
from tuner.workload import RunProgress

__all__ = ["ProgressHub", "RayBackend", "TrialWorker", "start_workers"]


@ray.remote(num_cpus=0)
class ProgressHub:
    """Progress and state per trial, written by workers, read by the driver."""

    def __init__(self) -> None:
        self._progress: dict[int, dict[str, Any]] = {}
        self._state: dict[int, str] = {}
        self._ready: dict[int, tuple[int | None, float]] = {}
        self._stop: set[int] = set()

    def report(self, trial_number: int, progress: dict[str, Any]) -> None:
        self._progress[trial_number] = progress

    def set_state(self, trial_number: int, state: str) -> None:
        self._state[trial_number] = state

    def set_ready(self, trial_number: int, kv_cache_tokens: int | None, startup_s: float) -> None:
        self._ready[trial_number] = (kv_cache_tokens, startup_s)

    def request_stop(self, trial_number: int) -> None:
        self._stop.add(trial_number)

    def should_stop(self, trial_number: int) -> bool:
        return trial_number in self._stop

    def snapshot(
        self,
    ) -> tuple[dict[int, dict[str, Any]], dict[int, str], dict[int, tuple[int | None, float]]]:
        return dict(self._progress), dict(self._state), dict(self._ready)

    def forget(self, trial_number: int) -> None:
        self._progress.pop(trial_number, None)
        self._state.pop(trial_number, None)
        self._ready.pop(trial_number, None)
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
                on_ready=lambda kv, s: hub.set_ready.remote(n, kv, s),
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


class RayBackend:
    """The study loop's backend on Ray: one `TrialWorker` per slot and one `ProgressHub`."""

    def __init__(self, *, slots: int, gpus_per_slot: int) -> None:
        self._gpus = gpus_per_slot
        self._hub = ProgressHub.remote()  # type: ignore[attr-defined]
        self._workers = start_workers(self._hub, slots=slots, gpus_per_slot=gpus_per_slot)
        self._inflight: dict[Any, tuple[int, int]] = {}  # ref -> (slot, trial number)

    @property
    def slots(self) -> int:
        """One per worker actor."""
        return len(self._workers)

    def submit(self, slot: int, request: TrialRequest) -> None:
        """Run `request` on the slot's actor."""
        ref = self._workers[slot].run.remote(request)
        self._inflight[ref] = (slot, request.trial_number)

    def wait(self, timeout_s: float) -> list[Finished]:
        """Results of the trials that finished within `timeout_s`."""
        if not self._inflight:
            time.sleep(timeout_s)
            return []
        done, _ = ray.wait(list(self._inflight), num_returns=1, timeout=timeout_s)
        if done:  # collect whatever else is ready too
            done, _ = ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=0)
        return [self._collect(ref) for ref in done]

    def _collect(self, ref: Any) -> Finished:
        slot, number = self._inflight.pop(ref)
        self._hub.forget.remote(number)
        try:
            result: TrialResult = ray.get(ref)
        except ray.exceptions.RayError as exc:
            # The actor died with its trial (killed, out of memory): a fresh one takes the slot.
            self._workers[slot] = start_workers(self._hub, slots=1, gpus_per_slot=self._gpus)[0]
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
            return Finished(slot, number, None, crash=line)
        return Finished(slot, number, result)

    def progress(self) -> dict[int, Progress]:
        """The hub's latest snapshot."""
        progress, states, ready = ray.get(self._hub.snapshot.remote())
        out = {}
        for number in {n for _, n in self._inflight.values()}:
            p = progress.get(number) or {}
            out[number] = Progress(
                state=states.get(number, "starting"),
                tasks_done=int(p.get("tasks_done", 0)),
                tasks_total=int(p.get("tasks_total", 0)),
                successes=int(p.get("successes", 0)),
                elapsed_s=float(p.get("elapsed_s", 0.0)),
                tasks_per_hour=p.get("tasks_per_hour"),
                ready=number in ready,
                kv_cache_tokens=ready.get(number, (None, 0.0))[0],
                startup_s=ready[number][1] if number in ready else None,
            )
        return out

    def request_stop(self, trial_number: int) -> None:
        """Tell the trial's worker to stop at its next task boundary."""
        self._hub.request_stop.remote(trial_number)

    def now(self) -> float:
        """Wall-clock monotonic seconds."""
        return time.monotonic()

    def close(self) -> None:
        """Kill the actors; `evaluate()` stops its server when its process goes."""
        for worker in self._workers:
            ray.kill(worker)
        ray.kill(self._hub)
        self._inflight.clear()
