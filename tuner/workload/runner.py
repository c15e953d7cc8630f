"""The workload runner: N closed-loop agents over one client, warm-up, then the scored window.

Phases of `run_workload`:

1. Check the server answers (`/health`), read its KV block size from /metrics.
2. Warm-up: the agents work the warm-up tasks (another seed; not scored) until all are done;
   then (unless `warmup_tasks` is 0) shape sweeps (`tuner.workload.warmup.warm_shapes`):
   every concurrency level the scored window will meet (1..agents) at once, with prompts up to
   the workload's longest context, repeated until two sweeps in a row run at the same rate
   (within `STEADY_TOLERANCE`), `MAX_SWEEPS` at most.
   The first time a server meets a batch shape or a prompt length it pays for it (kernel
   selection and allocation on the CPU build, allocator growth, compile caches that fill as new
   shapes are met), so a scored window that met them first would measure the server's
   first contact as much as the config, and unequally between configs and rounds.
3. Scored window: scrape /metrics, start the energy meter and the clock; the agents pull the
   scored tasks in fixed order, one task at a time each (closed loop); `should_stop()` is asked
   before every task, and a True ends the window early with what was measured.
4. Stop the clock and the meter, scrape /metrics again, score, return a `WorkloadRecord`.

The agents' jobs, how they work a phase and the stall rule are in `tuner.workload.phases`; the
shape sweeps in `tuner.workload.warmup`. This module sequences them and holds the client.

`on_activity`, when given, hears every `ACTIVITY_EVERY_S` what the run is doing, in words a
person follows in a log ("warm-up: 1 of 2 warm-up tasks done", "warm-up sweeps: sweep 2 of at
most 3",
"scoring: 5 of 12 tasks done, 2 agents, 1,234 prompt tok/s and 41 gen tok/s so far"): on a slow
CPU one task takes minutes, and the study's progress lines repeat the latest of these.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tuner.errors import WorkloadError
from tuner.metrics.energy import EnergyMeter
from tuner.metrics.guards import run_guarded, watch_acceptance
from tuner.metrics.prometheus import counter_deltas, scrape_metrics
from tuner.metrics.scoring import score_tasks
from tuner.records import WorkloadRecord
from tuner.workload.agent import AgentContext
from tuner.workload.phases import Phase, StallWatch, build_jobs, run_phase
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tokens import TokenCounter
from tuner.workload.warmup import WarmupSweeps, warm_shapes

__all__ = [
    "ACTIVITY_EVERY_S",
    "RunProgress",
    "failed_tasks",
    "make_client",
    "normalise_base_url",
    "run_workload",
    "run_workload_sync",
]

_log = logging.getLogger(__name__)

DEFAULT_BLOCK_SIZE = 16  # vLLM's GPU default when the server does not say
# How often `on_activity` hears what the run is doing (one cheap call; the driver prints it at
# its own interval).
ACTIVITY_EVERY_S = 1.0


@dataclass(frozen=True)
class RunProgress:
    """Progress of the scored window, reported after every scored task."""

    tasks_done: int
    tasks_total: int
    successes: int
    elapsed_s: float
    tasks_per_hour: float


@dataclass
class _Activity:
    """What the run is doing now, said as text to `on_activity` by `_tell_activity`."""

    agents: int
    stage: str = "warm-up"  # "warm-up", "sweep", "scoring"
    phase: Phase | None = None
    total: int = 0
    sweep: int = 0
    max_sweeps: int = 3

    def text(self) -> str:
        phase = self.phase
        if self.stage == "sweep":
            return (
                f"warm-up sweeps: sweep {self.sweep} of at most {self.max_sweeps} (every "
                "concurrency level at the workload's prompt lengths)"
            )
        done = len(phase.records) if phase is not None else 0
        if self.stage == "warm-up":
            if not self.total:
                return "warm-up"
            return f"warm-up: {done} of {self.total} warm-up tasks done"
        assert phase is not None
        steps = [s for o in phase.outcomes for s in o.steps]
        elapsed = max(time.perf_counter() - phase.started, 1e-9)
        prompt = sum(s.prompt_tokens for s in steps) / elapsed
        gen = sum(s.output_tokens for s in steps) / elapsed
        return (
            f"scoring: {done} of {self.total} tasks done, {self.agents} agents, "
            f"{prompt:,.0f} prompt tok/s and {gen:,.0f} gen tok/s so far"
        )


async def _tell_activity(activity: _Activity, on_activity: Callable[[str], None]) -> None:
    """Say `activity` every `ACTIVITY_EVERY_S` until cancelled."""
    while True:
        on_activity(activity.text())
        await asyncio.sleep(ACTIVITY_EVERY_S)


def normalise_base_url(url: str) -> str:
    """`http://host:port` from a URL that may end in `/` or `/v1`."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _check_server(client: httpx.AsyncClient, base_url: str) -> None:
    try:
        response = await client.get(f"{base_url}/health")
    except httpx.TransportError as exc:
        raise WorkloadError(
            f"cannot reach the vLLM server at {base_url} ({type(exc).__name__}): "
            "start it or fix --url"
        ) from None
    if response.status_code != 200:
        raise WorkloadError(
            f"the server at {base_url} is not ready: /health answered {response.status_code}"
        )


async def run_workload(
    client: httpx.AsyncClient,
    *,
    base_url: str,
    model: str,
    settings: WorkloadSettings,
    tokenizer: str | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    energy: EnergyMeter | None = None,
    block_size: int | None = None,
    on_activity: Callable[[str], None] | None = None,
) -> WorkloadRecord:
    """Run the agent workload against a running server and score it.

    Args:
        client: The one HTTP client every agent shares (its timeout bounds one stream read).
        base_url: The server, e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted).
        model: The served model name.
        settings: Mode, tasks, agents, seeds, protocol and shape.
        tokenizer: Tokenizer path for replay's forced lengths; defaults to `model` when that is
            a local directory, else the token estimate.
        on_progress: Called after every scored task (and once when the window opens).
        should_stop: Asked before each task; True ends the run early with a partial record.
        energy: GPU energy meter over the scored window; None: not measured.
        block_size: The server's KV block size (from its startup facts) for reuse classes;
            None: `settings.block_size`, else the server's /metrics, else 16.
        on_activity: Told every `ACTIVITY_EVERY_S` what the run is doing, as one phrase.

    Returns:
        The record with score, server counters and every task and step.

    Raises:
        WorkloadError: The server cannot be reached or stopped answering; a traces file is bad.
        WorkloadStalled: As many tasks in a row as there are agents (at least 2) missed their
            deadline.
    """
    activity = _Activity(settings.agents)
    ticker = (
        asyncio.create_task(_tell_activity(activity, on_activity))
        if on_activity is not None
        else None
    )
    try:
        return await _run(
            client, base_url, model, settings, tokenizer, on_progress, should_stop, energy,
            block_size, activity,
        )  # fmt: skip
    finally:
        if ticker is not None:
            ticker.cancel()


async def _run(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    settings: WorkloadSettings,
    tokenizer: str | None,
    on_progress: Callable[[RunProgress], None] | None,
    should_stop: Callable[[], bool] | None,
    energy: EnergyMeter | None,
    block_size: int | None,
    activity: _Activity,
) -> WorkloadRecord:
    """`run_workload`'s phases; `activity` follows them."""
    base_url = normalise_base_url(base_url)
    warm_jobs, scored_jobs, digest = build_jobs(settings)
    if tokenizer is None and Path(model).is_dir():
        tokenizer = model
    counter = TokenCounter.load(tokenizer)
    await _check_server(client, base_url)
    block_size = block_size or settings.block_size
    if block_size is None:
        snapshot = await scrape_metrics(client, base_url)
        block_size = (snapshot.block_size if snapshot else None) or DEFAULT_BLOCK_SIZE
    ctx = AgentContext(
        client, f"{base_url}/v1/chat/completions", model, settings, counter, block_size
    )
    clock_zero = time.perf_counter()
    warm = Phase(deque(warm_jobs), clock_zero)
    activity.phase, activity.total = warm, len(warm_jobs)
    stall = StallWatch(settings.agents, settings.task_deadline_s)
    await run_phase(ctx, warm, clock_zero, should_stop, None, stall=stall)
    # `warmup_tasks: 0` means no warm-up at all, shape sweeps included.
    stopping = should_stop is not None and should_stop()
    skip = stopping or settings.warmup_tasks == 0
    if not skip:
        activity.stage = "sweep"
    sweeps = WarmupSweeps() if skip else await warm_shapes(ctx, activity, warm.answered)
    _log.info(
        "warm-up: %.1f s (tasks and shape sweeps); sweep rates %s tokens/s%s",
        time.perf_counter() - clock_zero,
        list(sweeps.rates),
        ""
        if sweeps.steady or not sweeps.rates
        else " (one sweep: the calibration's bound)"
        if settings.warmup_max_sweeps < 2
        else " (not steady: the sweep limit was reached)",
    )

    before = await scrape_metrics(client, base_url)
    if energy is not None:
        energy.start()
    scored = Phase(deque(scored_jobs), time.perf_counter())
    total = len(scored_jobs)
    activity.stage, activity.phase, activity.total = "scoring", scored, total

    def report() -> None:
        if on_progress is None:
            return
        elapsed = time.perf_counter() - scored.started
        wins = sum(1 for r in scored.records if r.success)
        rate = wins * 3600.0 / elapsed if elapsed > 0 else 0.0
        on_progress(RunProgress(len(scored.records), total, wins, elapsed, rate))

    report()
    # The acceptance guard scrapes /metrics during the scored window (tuner.metrics.guards).
    guard = settings.acceptance_guard
    watch = (
        watch_acceptance(
            client, base_url, guard, lambda: warm.answered + scored.answered, time.monotonic
        )
        if guard.enabled
        else None
    )
    await run_guarded(
        run_phase(ctx, scored, clock_zero, should_stop, report, warm.answered, stall), watch
    )
    wall = time.perf_counter() - scored.started
    joules = energy.stop() if energy is not None else None
    memory_mib = energy.memory_used_mib() if energy is not None else None
    try:
        after = await scrape_metrics(client, base_url)
    except httpx.HTTPError:
        # The tasks are measured; a server that died right after them costs only the counters.
        after = None

    records = sorted(scored.records, key=lambda r: r.index)
    score = score_tasks(
        records,
        wall,
        itl_s=scored.gaps_s,
        energy_joules=joules,
        seed=settings.seed,
        agents=settings.agents,
    )
    return WorkloadRecord.from_score(
        score,
        mode=settings.mode,
        task_set_hash=digest,
        seed=settings.seed,
        agents=settings.agents,
        task_records=(*sorted(warm.records, key=lambda r: r.index), *records),
        counters=counter_deltas(before, after),
        gpu_memory_used_mib=memory_mib,
    )


def failed_tasks(record: WorkloadRecord, *, limit: int = 10) -> list[tuple[str, str]]:
    """(task id, why it failed) for the scored tasks that failed, at most `limit` of them.

    The reasons are those stored with each task: the class first (`context_overflow`,
    `deadline`, `step_limit`, `HTTP 500`, the checker's verdict), then the numbers and the
    server's own message. A last row says how many more failed when `limit` cuts the list.
    """
    failed = [t for t in record.task_records if not t.warmup and not t.success]
    rows = [(t.task_id, t.failure_reason or "failed (no reason recorded)") for t in failed]
    if len(rows) > limit:
        rows = [*rows[:limit], ("...", f"{len(rows) - limit} more failed tasks")]
    return rows


def make_client(settings: WorkloadSettings, *, extra_connections: int = 4) -> httpx.AsyncClient:
    """A client sized for `settings.agents` streams, reads bounded by the task deadline."""
    connections = settings.agents + extra_connections
    return httpx.AsyncClient(
        timeout=httpx.Timeout(settings.task_deadline_s, connect=10.0),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


def run_workload_sync(
    base_url: str, model: str, settings: WorkloadSettings, **kwargs: Any
) -> WorkloadRecord:
    """`run_workload` with its own client and event loop (for workers and scripts).

    Args:
        base_url: The server URL.
        model: The served model name.
        settings: The workload settings.
        **kwargs: `tokenizer`, `on_progress`, `should_stop`, `energy`, `block_size`,
            `on_activity` as for `run_workload`.
    """

    async def main() -> WorkloadRecord:
        async with make_client(settings) as client:
            return await run_workload(
                client, base_url=base_url, model=model, settings=settings, **kwargs
            )

    return asyncio.run(main())
