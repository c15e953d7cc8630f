"""The workload runner: N closed-loop agents over one client, warm-up, then the scored window.

Phases of `run_workload`:

1. Check the server answers (`/health`), read its KV block size from /metrics.
2. Warm-up: the agents work the warm-up tasks (another seed; not scored) until all are done;
   then (unless `warmup_tasks` is 0) shape sweeps (`warm_shapes`): every concurrency level
   the scored window will meet (1..agents) at once, with prompts up to the workload's longest
   context, repeated until two sweeps in a row run at the same rate (within
   `STEADY_TOLERANCE`), `MAX_SWEEPS` at most.
   The first time a server meets a batch shape or a prompt length it pays for it (kernel
   selection and allocation on the CPU build, allocator growth, compile caches that fill as new
   shapes are met), so a scored window that met them first would measure the server's
   first contact as much as the config, and unequally between configs and rounds.
3. Scored window: scrape /metrics, start the energy meter and the clock; the agents pull the
   scored tasks in fixed order, one task at a time each (closed loop); `should_stop()` is asked
   before every task, and a True ends the window early with what was measured.
4. Stop the clock and the meter, scrape /metrics again, score, return a `WorkloadRecord`.

`on_activity`, when given, hears every `ACTIVITY_EVERY_S` what the run is doing, in words a
person follows in a log ("warm-up: 1 of 2 warm-up tasks done", "warm-up sweeps: sweep 2 of at
most 3",
"scoring: 5 of 12 tasks done, 2 agents, 1,234 prompt tok/s and 41 gen tok/s so far"): on a slow
CPU one task takes minutes, and the study's progress lines repeat the latest of these.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tuner.errors import WorkloadError, WorkloadStalled
from tuner.metrics.energy import EnergyMeter
from tuner.metrics.guards import run_guarded, watch_acceptance
from tuner.metrics.prometheus import counter_deltas, scrape_metrics
from tuner.metrics.scoring import score_tasks
from tuner.records import TaskRecord, WorkloadRecord
from tuner.workload.agent import AgentContext, Outcome, live_task, replay_task
from tuner.workload.replay import ReplayScript, load_traces, script_for_task
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import Task, build_task_set, task_set_hash
from tuner.workload.tokens import TokenCounter

__all__ = [
    "ACTIVITY_EVERY_S",
    "MAX_SWEEPS",
    "STEADY_TOLERANCE",
    "RunProgress",
    "WarmupSweeps",
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


@dataclass(frozen=True)
class _Job:
    index: int
    warmup: bool
    task: Task | None  # live mode
    script: ReplayScript | None  # replay mode

    @property
    def ident(self) -> tuple[str, str, int]:
        source = self.task if self.task is not None else self.script
        assert source is not None
        return source.task_id, source.template, source.seed


@dataclass
class _Phase:
    jobs: deque[_Job]
    started: float
    records: list[TaskRecord] = field(default_factory=list)
    gaps_s: list[float] = field(default_factory=list)
    # Every task's outcome, finished or not: how many requests the server answered before a
    # failure tells "died at its first request" from "died mid-run".
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def answered(self) -> int:
        """Requests the server answered in this phase so far."""
        return sum(len(o.steps) for o in self.outcomes)


@dataclass
class _Activity:
    """What the run is doing now, said as text to `on_activity` by `_tell_activity`."""

    agents: int
    stage: str = "warm-up"  # "warm-up", "sweep", "scoring"
    phase: _Phase | None = None
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


def _jobs(settings: WorkloadSettings) -> tuple[list[_Job], list[_Job], str]:
    """Warm-up jobs, scored jobs, and the task-set hash."""
    if settings.traces is not None:
        if settings.mode != "replay":
            raise WorkloadError("traces are replayed: use --mode replay with --traces")
        scripts = load_traces(settings.traces)
        warm = scripts[: settings.warmup_tasks] if len(scripts) > settings.warmup_tasks else []
        scored = scripts[len(warm) :][: settings.tasks]
        # Trace ids are line numbers: the file's content tells two traces files apart.
        content = hashlib.sha256(Path(settings.traces).read_bytes()).hexdigest()
        digest = task_set_hash([content, *(s.task_id for s in scored)], settings.shape)
        warm_jobs = [_Job(i, True, None, s) for i, s in enumerate(warm)]
        return warm_jobs, [_Job(i, False, None, s) for i, s in enumerate(scored)], digest
    scored_tasks = build_task_set(settings)
    warm_tasks = build_task_set(settings, warmup=True)
    digest = task_set_hash([t.task_id for t in scored_tasks], settings.shape)

    def job(i: int, warmup: bool, task: Task) -> _Job:
        if settings.mode == "live":
            return _Job(i, warmup, task, None)
        return _Job(i, warmup, None, script_for_task(task, settings))

    warm_jobs = [job(i, True, t) for i, t in enumerate(warm_tasks)]
    return warm_jobs, [job(i, False, t) for i, t in enumerate(scored_tasks)], digest


async def _run_job(
    ctx: AgentContext, job: _Job, clock_zero: float, outcome: Outcome
) -> tuple[TaskRecord, Outcome]:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(ctx.settings.task_deadline_s):
            if job.task is not None:
                await live_task(ctx, job.task, outcome)
            else:
                assert job.script is not None
                await replay_task(ctx, job.script, outcome)
    except TimeoutError:
        outcome.success = False
        outcome.missed_deadline = True
        outcome.failure_reason = (
            f"deadline: not finished within {ctx.settings.task_deadline_s:g} s "
            f"({len(outcome.steps)} model calls answered)"
        )
    wall = time.perf_counter() - started
    task_id, template, seed = job.ident
    record = TaskRecord(
        index=job.index,
        task_id=task_id,
        template=template,
        seed=seed,
        warmup=job.warmup,
        success=outcome.success,
        failure_reason=None if outcome.success else outcome.failure_reason,
        started_s=started - clock_zero,
        wall_s=wall,
        steps=tuple(outcome.steps),
    )
    return record, outcome


@dataclass
class _StallWatch:
    """The stall rule: as many tasks in a row as there are agents (at least 2), each past its
    deadline.

    Then every agent's latest task missed it: the server answers too little to finish any task
    in time (a wedged engine that still reports healthy, or a config far too slow for this
    workload), and the remaining tasks would each wait out the deadline, for hours. Warm-up and
    scored tasks both count; one task finished in time resets it. One agent's single late task
    is not enough: that may be one long task.
    """

    agents: int
    deadline_s: float
    in_a_row: int = 0

    def saw(self, outcome: Outcome, answered: int) -> None:
        self.in_a_row = self.in_a_row + 1 if outcome.missed_deadline else 0
        if self.in_a_row >= max(2, self.agents):
            raise WorkloadStalled(
                f"stalled: {self.in_a_row} tasks in a row missed their {self.deadline_s:g} s "
                f"deadline ({answered} model calls answered in all); the server is wedged or "
                "far too slow for this workload, so the rest was not waited for",
                answered_requests=answered,
            )


async def _run_phase(
    ctx: AgentContext,
    phase: _Phase,
    clock_zero: float,
    should_stop: Callable[[], bool] | None,
    on_done: Callable[[], None] | None,
    answered_before: int = 0,
    stall: _StallWatch | None = None,
) -> None:
    async def agent() -> None:
        while phase.jobs:
            if should_stop is not None and should_stop():
                phase.jobs.clear()
                return
            job = phase.jobs.popleft()
            outcome = Outcome()
            phase.outcomes.append(outcome)
            record, outcome = await _run_job(ctx, job, clock_zero, outcome)
            phase.records.append(record)
            phase.gaps_s.extend(outcome.gaps_s)
            if stall is not None:
                stall.saw(outcome, answered_before + phase.answered)
            if on_done is not None:
                on_done()

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(ctx.settings.agents):
                group.create_task(agent())
    except ExceptionGroup as errors:
        first = errors.exceptions[0]
        if isinstance(first, httpx.TransportError):
            answered = answered_before + phase.answered
            raise WorkloadError(
                f"the server at {ctx.chat_url} stopped answering after {answered} answered "
                f"requests: {type(first).__name__}: {first}",
                answered_requests=answered,
            ) from first
        raise first from None


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
    warm_jobs, scored_jobs, digest = _jobs(settings)
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
    warm = _Phase(deque(warm_jobs), clock_zero)
    activity.phase, activity.total = warm, len(warm_jobs)
    stall = _StallWatch(settings.agents, settings.task_deadline_s)
    await _run_phase(ctx, warm, clock_zero, should_stop, None, stall=stall)
    # `warmup_tasks: 0` means no warm-up at all, shape sweeps included.
    stopping = should_stop is not None and should_stop()
    skip = stopping or settings.warmup_tasks == 0
    if not skip:
        activity.stage = "sweep"
    sweeps = WarmupSweeps() if skip else await warm_shapes(ctx, activity)
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
    scored = _Phase(deque(scored_jobs), time.perf_counter())
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
        _run_phase(ctx, scored, clock_zero, should_stop, report, warm.answered, stall), watch
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


# Shape sweeps after the warm-up tasks: at least 2 (to see a steady rate), at most MAX_SWEEPS
# (`WorkloadSettings.warmup_max_sweeps`, which a calibration may lower to 1 on a slow box);
# they stop once a sweep's token rate is within STEADY_TOLERANCE of the one before. Each sweep
# sends 1 + 2 + ... + levels requests of WARM_OUTPUT_TOKENS output tokens; on the CPU preset
# (2 agents, contexts under 3k tokens) a sweep is 3 requests and about 7,500 prompt tokens: a
# few seconds on a Zen 4 in bf16, about 23 s on a Zen 3 in fp32.
MAX_SWEEPS = 3
STEADY_TOLERANCE = 0.10
WARM_OUTPUT_TOKENS = 16
# Beyond this many agents the levels are the powers of two and `agents` itself (batch shapes
# a GPU build captures are of that kind), so a 64-agent warm-up stays 7 levels.
_ALL_LEVELS_UP_TO = 8
_FILLER = "Warm-up text to reach the workload's prompt lengths; it is never scored. "


@dataclass(frozen=True)
class WarmupSweeps:
    """What the shape sweeps did: tokens per second of each sweep, and refusals."""

    rates: tuple[float, ...] = ()
    refused: int = 0

    @property
    def steady(self) -> bool:
        """True when the last two sweeps ran within `STEADY_TOLERANCE` of each other."""
        return len(self.rates) >= 2 and _close(self.rates[-2], self.rates[-1])


def _close(a: float, b: float) -> bool:
    return a > 0 and abs(b - a) / a <= STEADY_TOLERANCE


def warm_levels(agents: int) -> list[int]:
    """The concurrency levels a warm-up sweep covers: 1..agents (powers of two beyond 8)."""
    if agents <= _ALL_LEVELS_UP_TO:
        return list(range(1, agents + 1))
    levels = [1 << i for i in range(agents.bit_length()) if 1 << i < agents]
    return [*levels, agents]


def _filler(counter: TokenCounter, tokens: int) -> str:
    """Text of about `tokens` tokens (never more) under `counter`."""
    per = max(1, counter.count(_FILLER))
    text = _FILLER * max(1, tokens // per)
    while len(text) > len(_FILLER) and counter.count(text) > tokens:
        text = text[: -len(_FILLER)]
    return text


def _longest_warm_prompt(settings: WorkloadSettings) -> int:
    return max(64, settings.shape.max_context_tokens - WARM_OUTPUT_TOKENS - 64)


def sweep_tokens(settings: WorkloadSettings) -> tuple[int, int]:
    """(prompt tokens, output tokens) one shape sweep of `warm_shapes` sends: level c sends c
    prompts of longest x (j + 1) / c tokens, each with WARM_OUTPUT_TOKENS forced tokens."""
    longest = _longest_warm_prompt(settings)
    levels = warm_levels(settings.agents)
    prompts = sum(longest * (j + 1) // c for c in levels for j in range(c))
    return prompts, WARM_OUTPUT_TOKENS * sum(levels)


async def warm_shapes(ctx: AgentContext, activity: _Activity | None = None) -> WarmupSweeps:
    """Shape sweeps until the server runs at a steady rate (see the module docstring).

    Each level c sends c requests at once whose prompts spread from 1/c of the workload's
    longest context up to all of it, each with a fresh first line (no prefix-cache hit), and
    `WARM_OUTPUT_TOKENS` forced output tokens. A refused request (e.g. a prompt beyond this
    server's limit) is counted, not raised: the warm-up is best effort.

    Raises:
        WorkloadError: The server stopped answering.
    """
    settings = ctx.settings
    longest = _longest_warm_prompt(settings)
    levels = warm_levels(settings.agents)

    async def one(tokens: int) -> tuple[int, bool]:
        messages = [
            {
                "role": "system",
                "content": f"Session {uuid.uuid4().hex}.\n" + _filler(ctx.counter, tokens),
            },
            {"role": "user", "content": "Continue."},
        ]
        body = {
            **settings.request_options,
            "model": ctx.model,
            "messages": messages,
            "max_tokens": WARM_OUTPUT_TOKENS,
            "min_tokens": WARM_OUTPUT_TOKENS,
            "ignore_eos": True,
            "temperature": 0.0,
            # Streamed, as the agents' requests are: the same serving path gets warm.
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        try:
            async with ctx.client.stream("POST", ctx.chat_url, json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    return 0, False
                tokens = 0
                async for line in response.aiter_lines():
                    if line.startswith("data: {") and '"usage"' in line:
                        usage = json.loads(line[len("data: ") :]).get("usage") or {}
                        tokens = int(usage.get("prompt_tokens") or 0) + int(
                            usage.get("completion_tokens") or 0
                        )
        except httpx.TransportError as exc:
            raise WorkloadError(
                f"the server at {ctx.chat_url} stopped answering in the warm-up: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        except (ValueError, httpx.HTTPError):
            return 0, False  # an answer it could not read: the warm-up is best effort
        return tokens, True

    rates: list[float] = []
    refused = 0
    most = min(MAX_SWEEPS, settings.warmup_max_sweeps)
    for sweep in range(most):
        if activity is not None:
            activity.sweep, activity.max_sweeps = sweep + 1, most
        t0 = time.perf_counter()
        tokens = 0
        for c in levels:
            answers = await asyncio.gather(*(one(longest * (j + 1) // c) for j in range(c)))
            tokens += sum(n for n, _ in answers)
            refused += sum(1 for _, ok in answers if not ok)
        rates.append(tokens / max(time.perf_counter() - t0, 1e-9))
        if len(rates) >= 2 and _close(rates[-2], rates[-1]):
            break
    return WarmupSweeps(tuple(round(r, 1) for r in rates), refused)


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
