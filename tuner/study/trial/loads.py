"""A load sweep's measuring step: several workloads in turn on one started server.

`tuner.study.trial.evaluate.evaluate` runs this instead of its own step 3-4 when the request
lists `loads` (`TrialRequest.loads`, built by `tuner.study.stages.load_sweep`): the server was
started (and its `max_num_seqs` clamped when Mamba blocks ran short) by evaluate's steps 1-2,
and is stopped here, always. Each load's workload is read as the search's is
(`tuner.study.trial.failures`: a stall, a collapsed acceptance, a server that died, nothing
answered); the first that fails ends the trial with the loads measured before it. Nothing else
runs on the server: no calibration, no correctness probe, no plain benchmark.

An interrupt stops the server under the running load (evaluate's `AbortWatch`); `watch.check()`
then raises `Aborted` and evaluate returns the trial interrupted, with nothing measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from tuner.errors import TunerError
from tuner.metrics import energy_meter_for
from tuner.records import ServerStartRecord, WorkloadRecord
from tuner.server import ServerSpec
from tuner.server.handle import ServerHandle
from tuner.study.trial.abort import AbortWatch
from tuner.study.trial.failures import Failure, one_line, workload_failure, workload_lost
from tuner.study.trial.request import TrialRequest, TrialResult
from tuner.workload import RunProgress, run_workload_sync

__all__ = ["measure_loads"]


def measure_loads(  # noqa: PLR0913 (evaluate's state at the end of its step 2)
    request: TrialRequest,
    handle: ServerHandle,
    spec: ServerSpec,
    starts: list[ServerStartRecord],
    *,
    on_state: Callable[[str], None],
    on_progress: Callable[[RunProgress], None] | None,
    watch: AbortWatch,
    t0: float,
    startup_s: float,
    requested: int | None,
    clamped: int | None,
) -> TrialResult:
    """Run `request.loads` in turn on `handle`, stop it, and return one record per load."""
    records: list[WorkloadRecord] = []
    failure: Failure | None = None
    notes: list[str] = []
    w0 = time.monotonic()
    try:
        with handle:
            for settings in request.loads:
                watch.check()
                on_state(f"{settings.agents} agent(s)")
                try:
                    record = run_workload_sync(
                        handle.base_url,
                        spec.served_model_name or spec.model,
                        settings,
                        tokenizer=request.tokenizer,
                        block_size=handle.facts.block_size,
                        on_progress=on_progress,
                        energy=energy_meter_for(request.gpu_ids),
                    )
                except (TunerError, httpx.HTTPError) as exc:
                    watch.check()  # the abort stopped the server under the workload
                    failure = workload_failure(handle, exc)
                    break
                watch.check()
                failure = workload_lost(handle, record)
                if failure is not None:
                    break
                records.append(record)
            on_state("stopping")
    except TunerError as exc:
        if not records:
            raise
        notes.append(f"stopping the server failed after the workload: {one_line(exc)}")
    starts.append(handle.record())
    kind, reason, infeasible = failure if failure is not None else (None, None, False)
    return TrialResult(
        trial_number=request.trial_number,
        spec=spec,
        server_starts=tuple(starts),
        loads=tuple(records),
        failure_kind=kind,
        failure_reason=reason,
        infeasible=infeasible,
        max_num_seqs_requested=requested,
        max_num_seqs_clamped=clamped,
        wall_s=time.monotonic() - t0,
        startup_s=startup_s,
        workload_s=time.monotonic() - w0,
        notes=tuple(notes),
    )
