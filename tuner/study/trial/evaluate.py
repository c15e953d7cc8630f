"""How one candidate is evaluated: start its server, run the agent workload, stop, report.

This is the "trainable" of the study: it knows nothing of Optuna or Ray. Lifecycle:

1. Launch `vllm serve` with the candidate (`tuner.server.Launcher`).
2. On a Mamba-block failure (hybrid models on GPUs), re-launch once with `max_num_seqs` clamped
   to the available blocks; the original and clamped values are both returned. No block
   available, or a second Mamba failure, makes the config infeasible.
3. Run warm-up and the scored agent workload, reporting progress; stop early when asked.
4. Optionally run the plain throughput benchmark (1 and 8 streams) on the same server.
5. Stop the server (always), and return a frozen `TrialResult`.

A load sweep's request (`TrialRequest.loads`) replaces steps 3-4 with its loads, run in turn on
the one server (`tuner.study.trial.loads.measure_loads`: one record per load, no calibration,
probe or plain benchmark); steps 1-2 and 5, and the interrupt's handling, are the same.

An interrupt (the study's Ctrl-C or SIGTERM, which reaches the worker as `should_abort`) ends
the trial in seconds whatever it is doing: a start is given up (`Launcher.launch`'s
`should_abort`), a ready server is stopped at once from a watcher thread (`AbortWatch`, in
`tuner.study.trial.abort`), so the calibration probe, the warm-up, the scored tasks, the
correctness probe or the plain benchmark fail on their requests in flight, and the trial returns
`interrupted`, with nothing measured: the driver queues it again.

Nothing measured is thrown away: once the scored workload has finished, an error in the plain
benchmark or in stopping the server becomes a note on the result (`TrialResult.notes`), and
the trial keeps its score and its rows.

The request and the result are in `tuner.study.trial.request`; how a failed workload is read
(did the server die, and in what words) in `tuner.study.trial.failures`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from tuner.errors import TunerError
from tuner.metrics import energy_meter_for
from tuner.records import ServerStartRecord, ThroughputRecord, WorkloadRecord
from tuner.server import FailureKind, Launcher, ServerSpec
from tuner.server.failures import StartupFailed
from tuner.server.launcher import StartAborted
from tuner.study.trial.abort import Aborted, AbortWatch
from tuner.study.trial.failures import one_line, unless_died, workload_failure, workload_lost
from tuner.study.trial.loads import measure_loads
from tuner.study.trial.request import ThroughputPlan, TrialRequest, TrialResult
from tuner.workload import (
    RunProgress,
    TokenCounter,
    run_throughput_sync,
    run_workload_sync,
)
from tuner.workload.calibration import Calibration, measure_speeds
from tuner.workload.correctness_probe import ProbeResult, try_probe

__all__ = ["evaluate"]


StateCallback = Callable[[str], None]
ProgressCallback = Callable[[RunProgress], None]
# Called once the server answers /health: its KV cache tokens (None when vLLM did not say) and
# the seconds it took to start, for the progress lines.
ReadyCallback = Callable[[int | None, float], None]


def _noop_state(_state: str) -> None:
    return None


# The `failure_kind` of a trial an interrupt ended (nothing of it is measured or stored).
INTERRUPTED = "interrupted"


def evaluate(
    request: TrialRequest,
    *,
    on_state: StateCallback = _noop_state,
    on_progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_ready: ReadyCallback | None = None,
    should_abort: Callable[[], bool] | None = None,
) -> TrialResult:
    """Evaluate one candidate end to end; the server never outlives this call.

    `should_abort`: asked several times a second; True ends the trial within seconds in any
    phase, its server stopped, as `failure_kind` "interrupted" with nothing measured.
    """
    watch = AbortWatch(should_abort)
    try:
        try:
            return _evaluate(request, on_state, on_progress, should_stop, on_ready, watch)
        except Exception:
            watch.check()  # an error the abort caused (its server stopped under a request)
            raise
    except Aborted:
        return TrialResult(
            trial_number=request.trial_number,
            spec=request.spec,
            failure_kind=INTERRUPTED,
            failure_reason="the run was interrupted; nothing of this trial was measured",
        )
    finally:
        watch.close()


def _evaluate(
    request: TrialRequest,
    on_state: StateCallback,
    on_progress: ProgressCallback | None,
    should_stop: Callable[[], bool] | None,
    on_ready: ReadyCallback | None,
    watch: AbortWatch,
) -> TrialResult:
    t0 = time.monotonic()
    cache = Path(request.cache_dir)
    launcher = Launcher(
        log_dir=cache / "logs" / request.study_name, state_dir=cache / "run", cache_dir=cache
    )
    spec = request.spec
    requested = spec.max_num_seqs
    clamped: int | None = None
    starts: list[ServerStartRecord] = []
    _preload_tokenizer(request.tokenizer)
    for attempt in range(2):
        watch.check()
        starting = "server starting" if attempt == 0 else "server restarting (clamped max_num_seqs)"
        on_state(starting)
        launch_t0 = time.monotonic()

        def waiting(_s: float, phase: str | None, starting: str = starting) -> None:
            # The state is what the progress lines repeat: the log's last start-up phase.
            on_state(f"{starting}: vLLM says: {phase}" if phase else starting)

        try:
            handle = launcher.launch(
                spec,
                timeout_s=request.startup_timeout_s,
                attempt=attempt,
                on_wait=waiting,
                should_abort=watch.aborted,
            )
        except StartAborted:
            raise Aborted() from None
        except StartupFailed as exc:
            watch.check()  # a server that died of the interrupt's stop is no failure of its own
            failure = exc.failure
            starts.append(failure.record())
            infeasible = failure.infeasible
            if failure.kind == FailureKind.MAMBA_BLOCKS_EXCEEDED:
                available = int(failure.details.get("available") or 0)
                if attempt == 0 and available > 0:
                    clamped = available
                    spec = spec.replace(max_num_seqs=clamped)
                    continue
                # No block at all, or still too many after the clamp: this card cannot serve
                # the config, which the sampler must learn (a FAIL it would ignore).
                infeasible = True
            return TrialResult(
                trial_number=request.trial_number,
                spec=spec,
                server_starts=tuple(starts),
                failure_kind=str(failure.kind.value),
                failure_reason=failure.summary(),
                infeasible=infeasible,
                max_num_seqs_requested=requested,
                max_num_seqs_clamped=clamped,
                wall_s=time.monotonic() - t0,
            )
        startup_s = time.monotonic() - launch_t0
        watch.attach(handle)
        try:
            watch.check()
            if on_ready is not None:
                on_ready(handle.facts.kv_cache_tokens, startup_s)
            if request.loads:  # a load sweep's server: its loads in turn instead of steps 3-4
                return measure_loads(
                    request, handle, spec, starts, on_state=on_state, on_progress=on_progress,
                    watch=watch, t0=t0, startup_s=startup_s, requested=requested, clamped=clamped,
                )  # fmt: skip
            return _measure(request, handle, spec, starts, on_state, on_progress, should_stop, t0,
                            startup_s, requested, clamped, watch)  # fmt: skip
        finally:
            watch.attach(None)
    raise AssertionError("unreachable: the second attempt always returns")


def _measure(  # noqa: C901, PLR0913 (steps 3-5 in order, each with its abort check)
    request: TrialRequest,
    handle: Any,
    spec: ServerSpec,
    starts: list[ServerStartRecord],
    on_state: StateCallback,
    on_progress: ProgressCallback | None,
    should_stop: Callable[[], bool] | None,
    t0: float,
    startup_s: float,
    requested: int | None,
    clamped: int | None,
    watch: AbortWatch,
) -> TrialResult:
    """Steps 3-5 on a started server: workload, plain benchmark, stop.

    `watch.check()` after every step, and first thing in every error handler: once the trial is
    told to abort, its server is stopped under it and any error is the abort's.
    """
    workload: WorkloadRecord | None = None
    throughput: tuple[ThroughputRecord, ...] = ()
    failure_kind = failure_reason = None
    infeasible = False
    workload_s = throughput_s = 0.0
    notes: list[str] = []
    probe: ProbeResult | None = None  # the correctness probe (tuner.workload.correctness_probe)
    planned = [request.workload.tasks]
    asked_to_stop = [False]

    def progress(p: RunProgress) -> None:
        planned[0] = p.tasks_total  # a traces file may hold fewer conversations than `tasks`
        if on_progress is not None:
            on_progress(p)

    def stop() -> bool:
        if should_stop is not None and should_stop():
            asked_to_stop[0] = True
        return asked_to_stop[0]

    calibration: Calibration | None = None
    try:
        with handle:
            if request.sizing is not None:
                on_state("calibrating")
                try:
                    speeds = measure_speeds(
                        handle.base_url, spec.served_model_name or spec.model,
                        streams=request.workload.agents,
                    )  # fmt: skip
                    watch.check()
                    calibration = request.sizing.calibrate(speeds, request.trial_number, startup_s)
                    request = replace(request, workload=calibration.settings)
                    planned[0] = request.workload.tasks
                except TunerError as exc:
                    watch.check()
                    failure_kind, failure_reason, infeasible = unless_died(
                        handle, 0, "workload_failed", f"the calibration probe failed: {exc}", False
                    )
            watch.check()
            on_state("workload")
            w0 = time.monotonic()
            try:
                if failure_kind is not None:
                    raise _Skip()
                workload = run_workload_sync(
                    handle.base_url,
                    spec.served_model_name or spec.model,
                    request.workload,
                    tokenizer=request.tokenizer,
                    block_size=handle.facts.block_size,
                    on_progress=progress,
                    should_stop=stop,
                    energy=energy_meter_for(request.gpu_ids),
                    on_activity=on_state,
                )
            except _Skip:
                pass
            except (TunerError, httpx.HTTPError) as exc:
                watch.check()  # the abort stopped the server under the workload
                failure_kind, failure_reason, infeasible = workload_failure(handle, exc)
            watch.check()
            workload_s = time.monotonic() - w0
            stopped_early = (
                workload is not None and asked_to_stop[0] and workload.tasks < planned[0]
            )
            lost = None
            if workload is not None and not stopped_early:
                lost = workload_lost(handle, workload)  # nothing answered, or the server died
            if lost is not None:
                failure_kind, failure_reason, infeasible = lost
                workload = None
            if workload is not None and not stopped_early:
                on_state("correctness probe")
                probe = try_probe(
                    handle.base_url, spec.served_model_name or spec.model, request.workload
                )
                watch.check()  # a probe the abort cut short answers None
            if workload is not None and not stopped_early and request.throughput.streams:
                streams = " and ".join(str(n) for n in request.throughput.streams)
                on_state(f"plain benchmark: {streams} streams")
                t1 = time.monotonic()
                try:
                    throughput = _throughput(handle.base_url, spec, request.throughput)
                except Exception as exc:
                    watch.check()
                    # Any error: the workload is measured and must survive what comes after it.
                    notes.append(f"plain benchmark failed after the workload: {one_line(exc)}")
                throughput_s = time.monotonic() - t1
                watch.check()
            on_state("stopping")
    except TunerError as exc:
        if workload is None:
            raise
        notes.append(f"stopping the server failed after the workload: {one_line(exc)}")
    starts.append(handle.record())
    return TrialResult(
        trial_number=request.trial_number,
        spec=spec,
        server_starts=tuple(starts),
        workload=workload,
        throughput=throughput,
        failure_kind=failure_kind,
        failure_reason=failure_reason,
        infeasible=infeasible,
        pruned=workload is not None and asked_to_stop[0] and workload.tasks < planned[0],
        max_num_seqs_requested=requested,
        max_num_seqs_clamped=clamped,
        wall_s=time.monotonic() - t0,
        startup_s=startup_s,
        workload_s=workload_s,
        throughput_s=throughput_s,
        notes=tuple(notes),
        probe=probe,
        calibration=calibration,
    )


class _Skip(Exception):
    """The calibration probe failed: no workload on this server."""


def _preload_tokenizer(tokenizer: str | None) -> None:
    """Load the workload's tokenizer while the server starts (about 3 s otherwise spent after).

    The counter is cached per process; a failure here is left for the workload to report.
    """
    if tokenizer is None:
        return

    def load() -> None:
        with contextlib.suppress(TunerError):
            TokenCounter.load(tokenizer)

    threading.Thread(target=load, name="tokenizer-preload", daemon=True).start()


def _throughput(
    base_url: str, spec: ServerSpec, plan: ThroughputPlan
) -> tuple[ThroughputRecord, ...]:
    return tuple(
        run_throughput_sync(
            base_url,
            spec.served_model_name or spec.model,
            streams=streams,
            requests=max(plan.requests, streams),
            output_tokens=plan.output_tokens,
            prompt_tokens=plan.prompt_tokens,
        )
        for streams in plan.streams
    )
