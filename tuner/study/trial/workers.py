"""Ray side of the study: one actor per GPU slot, and a hub that carries progress both ways.

Workers evaluate candidates and return frozen `TrialResult`s; they never touch the database.
The hub is how the driver hears progress (for pruning and the display) and how it asks a
worker to stop a losing trial early. `RayBackend` wraps both as the study loop's
`tuner.study.trial.backend.TrialBackend`.

Placement follows the hardware, wherever a node is: a slot of a GPU preset reserves
`gpus_per_slot` of Ray's GPUs (one node's, so a tensor-parallel server never spans nodes); a
slot of a CPU preset reserves one `CPU_SLOT_RESOURCE` where the cluster offers that resource
(an operator starts each CPU box with `ray start ... --resources '{"tuner_cpu_slot": 1}'`:
one CPU server per box), and nothing on a local instance, which is this one box. The hub stays
on the driver's node, so losing another node never takes the driver's progress with it.

A lost node (its raylet killed, the machine gone) kills the worker with its trial; the driver
asks Ray's GCS whether the worker's node is still alive (`NODE_DEATH_WAIT_S`) and returns the
trial as `node_lost`, which the loop records interrupted and queues again. The slot's new
worker may have nowhere to go until a node rejoins: `ready(slot)` says so, and the loop uses
the other slots meanwhile.

An interrupt of the study (`RayBackend.abort`) reaches each worker through the hub within
`STOP_POLL_S`: the worker's trial stops its server at once and returns "interrupted" in any
phase (`tuner.study.trial.evaluate`). A worker that has not returned `ABORT_WAIT_S` later is
killed (its server group's supervisor then takes the group down), so the driver never waits on
it; nothing a worker returns after the abort is meant to be stored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, replace
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tuner.study.trial.backend import Finished, Progress
from tuner.study.trial.evaluate import evaluate
from tuner.study.trial.request import TrialRequest, TrialResult
from tuner.workload import RunProgress

__all__ = [
    "ABORT_WAIT_S",
    "CPU_SLOT_RESOURCE",
    "NODE_DEATH_WAIT_S",
    "ProgressHub",
    "RayBackend",
    "TrialWorker",
    "start_workers",
]

# The custom Ray resource a node offers per CPU server it can host (one per box: a CPU vLLM
# server takes every core).
CPU_SLOT_RESOURCE = "tuner_cpu_slot"
# How long a dead worker's node may still look alive to the GCS: its health check fails a node
# after a few missed beats (Ray's defaults: 5 of 3 s), and the worker's death reaches the
# driver first. A worker that crashed on a live node costs this wait once.
NODE_DEATH_WAIT_S = 30.0
# How long a study's start waits for its first worker to be placed (the slot check has made
# sure the cluster offers the slots; a worker process starts in seconds), then for the others:
# a slot placed later is used from then on (`ready`). Waiting for every slot cost the full
# wait whenever one could not be placed (a node lost earlier in the study: its replacement
# waits for hardware that is gone), before every later stage that starts workers.
PLACEMENT_WAIT_S = 120.0
PLACEMENT_GRACE_S = 10.0
# How often a worker asks the hub whether its trial should stop or abort.
STOP_POLL_S = 0.25
# How long `abort` lets workers stop their trials (a server stop: SIGTERM, SIGKILL after
# tuner.server.handle.ABORT_GRACE_S) before it kills them: within a study's 10 s.
ABORT_WAIT_S = 6.0


@ray.remote(num_cpus=0)
class ProgressHub:
    """Progress and state per trial, written by workers, read by the driver."""

    def __init__(self) -> None:
        self._progress: dict[int, dict[str, Any]] = {}
        self._state: dict[int, str] = {}
        self._ready: dict[int, tuple[int | None, float]] = {}
        self._stop: set[int] = set()
        self._abort: set[int] = set()

    def report(self, trial_number: int, progress: dict[str, Any]) -> None:
        self._progress[trial_number] = progress

    def set_state(self, trial_number: int, state: str) -> None:
        self._state[trial_number] = state

    def set_ready(self, trial_number: int, kv_cache_tokens: int | None, startup_s: float) -> None:
        self._ready[trial_number] = (kv_cache_tokens, startup_s)

    def request_stop(self, trial_number: int) -> None:
        self._stop.add(trial_number)

    def request_abort(self, trial_number: int) -> None:
        self._abort.add(trial_number)

    def stop_state(self, trial_number: int) -> tuple[bool, bool]:
        """(stop at the next task boundary, abort now) for the trial."""
        return trial_number in self._stop, trial_number in self._abort

    def snapshot(
        self,
    ) -> tuple[dict[int, dict[str, Any]], dict[int, str], dict[int, tuple[int | None, float]]]:
        return dict(self._progress), dict(self._state), dict(self._ready)

    def forget(self, trial_number: int) -> None:
        self._progress.pop(trial_number, None)
        self._state.pop(trial_number, None)
        self._ready.pop(trial_number, None)
        self._stop.discard(trial_number)
        self._abort.discard(trial_number)


class _TrialWorker:
    """Evaluates one trial at a time on the GPUs Ray gave this actor."""

    def __init__(self, hub: Any) -> None:
        self._hub = hub

    def node_id(self) -> str:
        """The Ray node this worker was placed on (hex); answering also means it is placed."""
        return str(ray.get_runtime_context().get_node_id())

    def run(self, request: TrialRequest) -> TrialResult:
        n = request.trial_number
        hub = self._hub
        stop = threading.Event()
        abort = threading.Event()
        done = threading.Event()

        def poll_stop() -> None:
            # Asking the hub from the workload's event loop would block it; a thread keeps the
            # answers in Events that `should_stop` and `should_abort` read for free.
            while not done.wait(STOP_POLL_S):
                stopping, aborting = ray.get(hub.stop_state.remote(n))
                if stopping:
                    stop.set()
                if aborting:
                    stop.set()
                    abort.set()
                    return

        poller = threading.Thread(target=poll_stop, daemon=True)
        poller.start()
        gpu_ids = tuple(int(g) for g in ray.get_gpu_ids())
        if gpu_ids and not request.gpu_ids:
            request = _with_gpus(request, gpu_ids)

        def on_progress(progress: RunProgress) -> None:
            hub.report.remote(n, asdict(progress))

        try:
            result = evaluate(
                request,
                on_state=lambda s: hub.set_state.remote(n, s),
                on_progress=on_progress,
                should_stop=stop.is_set,
                on_ready=lambda kv, s: hub.set_ready.remote(n, kv, s),
                should_abort=abort.is_set,
            )
            return replace(result, node_id=self.node_id())
        finally:
            done.set()


def _with_gpus(request: TrialRequest, gpu_ids: tuple[int, ...]) -> TrialRequest:
    # The server gets exactly this slot's GPUs, written into its spec so the start record
    # shows which ones it had.
    visible = ",".join(str(g) for g in gpu_ids)
    spec = request.spec.replace(env={**request.spec.env, "CUDA_VISIBLE_DEVICES": visible})
    return replace(request, gpu_ids=gpu_ids, spec=spec)


TrialWorker = ray.remote(_TrialWorker)


def slot_resources(gpus_per_slot: int) -> dict[str, Any]:
    """What one slot's actor reserves (see the module docstring)."""
    options: dict[str, Any] = {"num_cpus": 0}
    if gpus_per_slot > 0:
        options["num_gpus"] = gpus_per_slot
    elif CPU_SLOT_RESOURCE in ray.cluster_resources():
        options["resources"] = {CPU_SLOT_RESOURCE: 1}
    return options


def start_workers(hub: Any, *, slots: int, gpus_per_slot: int) -> list[Any]:
    """One actor per slot, each reserving one slot's hardware (`slot_resources`)."""
    options = {**slot_resources(gpus_per_slot), "max_concurrency": 1}
    return [TrialWorker.options(**options).remote(hub) for _ in range(slots)]


def _driver_node() -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def _node_alive(node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


def _node_lost(node_id: str | None) -> bool:
    """Whether the GCS declares `node_id` dead within `NODE_DEATH_WAIT_S`."""
    if node_id is None:
        return False
    deadline = time.monotonic() + NODE_DEATH_WAIT_S
    while _node_alive(node_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(1.0)
    return True


class RayBackend:
    """The study loop's backend on Ray: one `TrialWorker` per slot and one `ProgressHub`."""

    def __init__(self, *, slots: int, gpus_per_slot: int) -> None:
        self._gpus = gpus_per_slot
        # On the driver's node: a lost worker node must not take the progress relay with it.
        self._hub = ProgressHub.options(scheduling_strategy=_driver_node()).remote()  # type: ignore[attr-defined]
        self._workers = start_workers(self._hub, slots=slots, gpus_per_slot=gpus_per_slot)
        # Each worker's node, asked once: the answer comes when the actor is placed.
        self._node_refs = [w.node_id.remote() for w in self._workers]
        self._nodes: list[str | None] = [None] * slots
        # The first placement takes a moment (a worker process starts on its node); the
        # loop starts trials on ready slots only, so wait for one here, then briefly for the
        # rest (a slot that cannot be placed now is used once it is).
        ray.wait(self._node_refs, num_returns=1, timeout=PLACEMENT_WAIT_S)
        ray.wait(self._node_refs, num_returns=slots, timeout=PLACEMENT_GRACE_S)
        self._inflight: dict[Any, tuple[int, int]] = {}  # ref -> (slot, trial number)
        self._abort_deadline: float | None = None  # `abort` was called: kill workers after it

    @property
    def slots(self) -> int:
        """One per worker actor."""
        return len(self._workers)

    def ready(self, slot: int) -> bool:
        """Whether the slot's worker is placed on a node (a lost node's replacement may wait)."""
        return self._node_of(slot, timeout=0) is not None

    def _node_of(self, slot: int, *, timeout: float) -> str | None:
        if self._nodes[slot] is None:
            ref = self._node_refs[slot]
            done, _ = ray.wait([ref], timeout=timeout)
            if done:
                try:
                    self._nodes[slot] = ray.get(ref)
                except ray.exceptions.RayError:
                    return None  # it died before it answered; `_collect` replaces it
        return self._nodes[slot]

    def submit(self, slot: int, request: TrialRequest) -> None:
        """Run `request` on the slot's actor."""
        ref = self._workers[slot].run.remote(request)
        self._inflight[ref] = (slot, request.trial_number)

    def wait(self, timeout_s: float) -> list[Finished]:
        """Results of the trials that finished within `timeout_s`; after `abort`, every trial
        still running once `ABORT_WAIT_S` have passed, its worker killed."""
        if not self._inflight:
            time.sleep(timeout_s)
            return []
        if self._abort_deadline is not None:
            timeout_s = max(0.0, min(timeout_s, self._abort_deadline - time.monotonic()))
        done, _ = ray.wait(list(self._inflight), num_returns=1, timeout=timeout_s)
        if done:  # collect whatever else is ready too
            done, _ = ray.wait(list(self._inflight), num_returns=len(self._inflight), timeout=0)
        finished = [self._collect(ref) for ref in done]
        if self._abort_deadline is not None and time.monotonic() >= self._abort_deadline:
            finished.extend(self._kill_running())
        return finished

    def abort(self) -> None:
        """The study was interrupted: every running trial stops now, in whatever phase.

        Each worker stops its server and returns "interrupted" (`evaluate`'s `should_abort`);
        `wait` returns the ones that have not within `ABORT_WAIT_S`, their workers killed.
        """
        for _slot, number in self._inflight.values():
            self._hub.request_abort.remote(number)
        self._abort_deadline = time.monotonic() + ABORT_WAIT_S

    def _kill_running(self) -> list[Finished]:
        out = []
        for ref, (slot, number) in list(self._inflight.items()):
            del self._inflight[ref]
            ray.kill(self._workers[slot])
            line = f"the worker did not stop within {ABORT_WAIT_S:g} s of the interrupt; killed"
            out.append(Finished(slot, number, None, crash=line))
        return out

    def _collect(self, ref: Any) -> Finished:
        slot, number = self._inflight.pop(ref)
        self._hub.forget.remote(number)
        node = self._node_of(slot, timeout=0)
        try:
            result: TrialResult = ray.get(ref)
        except ray.exceptions.RayError as exc:
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            if self._abort_deadline is not None:
                # Interrupted: no waiting for the GCS to judge the node, no new worker.
                return Finished(slot, number, None, crash=line, node_id=node)
            # The actor died with its trial (killed, out of memory, its node lost): a fresh one
            # takes the slot, wherever Ray finds the slot's hardware free.
            lost = _node_lost(node)
            self._workers[slot] = start_workers(self._hub, slots=1, gpus_per_slot=self._gpus)[0]
            self._node_refs[slot] = self._workers[slot].node_id.remote()
            self._nodes[slot] = None
            if lost:
                line = f"Ray node {node} was lost while it ran this trial ({line})"
            return Finished(slot, number, None, crash=line, node_id=node, node_lost=lost)
        return Finished(slot, number, result, node_id=result.node_id or node)

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
