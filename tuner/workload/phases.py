"""The jobs of a workload run and the agents that work them: one phase (warm-up or scored) at a
time, each agent pulling the next job and working it to the end (closed loop).

`build_jobs` turns the settings into warm-up and scored jobs (live tasks, replay scripts or
recorded traces) and the task-set hash; `run_phase` runs `settings.agents` agents over a
`Phase`'s jobs; `StallWatch` is the stall rule that ends a run whose server answers too little
to finish any task in time. `tuner.workload.runner` sequences the phases and scores the window.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tuner.errors import WorkloadError, WorkloadStalled
from tuner.records import TaskRecord
from tuner.workload.agent import AgentContext, Outcome, live_task, replay_task
from tuner.workload.replay import ReplayScript, load_traces, script_for_task
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import Task, build_task_set, task_set_hash

__all__ = ["Job", "Phase", "StallWatch", "build_jobs", "run_phase"]


@dataclass(frozen=True)
class Job:
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
class Phase:
    jobs: deque[Job]
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


def build_jobs(settings: WorkloadSettings) -> tuple[list[Job], list[Job], str]:
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
        warm_jobs = [Job(i, True, None, s) for i, s in enumerate(warm)]
        return warm_jobs, [Job(i, False, None, s) for i, s in enumerate(scored)], digest
    scored_tasks = build_task_set(settings)
    warm_tasks = build_task_set(settings, warmup=True)
    digest = task_set_hash([t.task_id for t in scored_tasks], settings.shape)

    def job(i: int, warmup: bool, task: Task) -> Job:
        if settings.mode == "live":
            return Job(i, warmup, task, None)
        return Job(i, warmup, None, script_for_task(task, settings))

    warm_jobs = [job(i, True, t) for i, t in enumerate(warm_tasks)]
    return warm_jobs, [job(i, False, t) for i, t in enumerate(scored_tasks)], digest


async def _run_job(
    ctx: AgentContext, job: Job, clock_zero: float, outcome: Outcome
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
class StallWatch:
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


async def run_phase(
    ctx: AgentContext,
    phase: Phase,
    clock_zero: float,
    should_stop: Callable[[], bool] | None,
    on_done: Callable[[], None] | None,
    answered_before: int = 0,
    stall: StallWatch | None = None,
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
