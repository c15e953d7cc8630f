"""A named fake of the study's execution seam: trials answered from a script, on a fake clock.

`ScriptedBackend` implements `tuner.study.trial.backend.TrialBackend` without Ray, vLLM or sleeping:
each submitted trial gets a `ScriptedRun` from a function of its params (its rate, startup
time, infeasibility or crash), tasks finish at evenly spaced times of a simulated clock, and
`wait()` jumps the clock to the next event. The study loop, sampler, pruner rule, duplicate
handling and budget under test are the real ones; only the measurement is scripted. Tests use
it to step the loop in milliseconds; a benchmark can do the same with recorded trials.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tuner.records import ServerStartRecord, TaskRecord, WorkloadRecord
from tuner.study.trial.backend import Finished, Progress
from tuner.study.trial.request import TrialRequest, TrialResult

__all__ = ["ScriptedBackend", "ScriptedRun"]


@dataclass(frozen=True)
class ScriptedRun:
    """How one scripted trial behaves.

    Attributes:
        tasks_per_hour: The rate its tasks finish at (all succeed).
        startup_s: Seconds before the first task starts.
        infeasible: The server "cannot start" on this card (after `startup_s`).
        crash: The worker "dies" after `startup_s` with this line.
    """

    tasks_per_hour: float = 100.0
    startup_s: float = 30.0
    infeasible: bool = False
    crash: str | None = None


@dataclass
class _Live:
    slot: int
    request: TrialRequest
    run: ScriptedRun
    started: float
    stop_at_task: int | None = None

    @property
    def total(self) -> int:
        return self.request.workload.tasks

    def task_time(self, i: int) -> float:
        """When task i (1-based) finishes."""
        return self.started + self.run.startup_s + i * 3600.0 / self.run.tasks_per_hour

    def end_time(self) -> float:
        if self.run.infeasible or self.run.crash:
            return self.started + self.run.startup_s
        return self.task_time(self.stop_at_task or self.total)

    def done_at(self, now: float) -> int:
        if now < self.started + self.run.startup_s:
            return 0
        rate = self.run.tasks_per_hour / 3600.0
        return min(self.total, int((now - self.started - self.run.startup_s) * rate + 1e-9))


@dataclass
class ScriptedBackend:
    """A `TrialBackend` whose trials follow `script(params)` on a simulated clock.

    With `record_tasks`, a run's workload record carries its tasks ("task0", "task1", ...,
    each the same seconds), so the results can pair runs by task id. With `replacement_s`, a
    slot whose worker crashed is not `ready` again until that many simulated seconds after the
    crash, as a Ray slot waits for its replacement actor to be placed.
    """

    script: Callable[[dict[str, Any]], ScriptedRun]
    n_slots: int = 1
    record_tasks: bool = False
    replacement_s: float = 0.0
    clock: float = 0.0
    submitted: list[TrialRequest] = field(default_factory=list)
    _live: dict[int, _Live] = field(default_factory=dict)
    _placed_at: dict[int, float] = field(default_factory=dict)  # slot -> when its worker is back

    @property
    def slots(self) -> int:
        """As many as asked for."""
        return self.n_slots

    def ready(self, slot: int) -> bool:
        """Placed, unless its worker crashed less than `replacement_s` ago."""
        return self.clock >= self._placed_at.get(slot, 0.0) - 1e-9

    def submit(self, slot: int, request: TrialRequest) -> None:
        """Start the scripted trial now."""
        self.submitted.append(request)
        self._live[request.trial_number] = _Live(
            slot, request, self.script(request.params), self.clock
        )

    def wait(self, timeout_s: float) -> list[Finished]:
        """Jump to the next task boundary or trial end (at most `timeout_s` ahead)."""
        if not self._live:
            self.clock += timeout_s
            return []
        events = [t.end_time() for t in self._live.values()]
        for t in self._live.values():
            nxt = t.done_at(self.clock) + 1
            if nxt <= t.total and not (t.run.infeasible or t.run.crash):
                events.append(t.task_time(nxt))
        self.clock = max(self.clock, min(min(events), self.clock + timeout_s))
        out = []
        for number, t in list(self._live.items()):
            if self.clock >= t.end_time() - 1e-9:
                del self._live[number]
                out.append(self._finish(t))
        return out

    def _finish(self, t: _Live) -> Finished:
        n = t.request.trial_number
        if t.run.crash:
            self._placed_at[t.slot] = t.end_time() + self.replacement_s
            return Finished(t.slot, n, None, crash=t.run.crash)
        start = ServerStartRecord(argv=("scripted",), env={}, log_path="scripted")
        if t.run.infeasible:
            return Finished(
                t.slot,
                n,
                TrialResult(
                    n,
                    t.request.spec,
                    (start,),
                    failure_kind="no_kv_cache_memory",
                    failure_reason="scripted: the config does not fit",
                    infeasible=True,
                ),
            )
        tasks = t.stop_at_task or t.total
        wall = tasks * 3600.0 / t.run.tasks_per_hour
        rate = tasks * 3600.0 / wall
        each = wall / tasks if tasks else 0.0
        records = tuple(
            TaskRecord(
                index=i,
                task_id=f"task{i}",
                template="scripted",
                seed=0,
                warmup=False,
                success=True,
                failure_reason=None,
                started_s=i * each,
                wall_s=each,
            )
            for i in range(tasks if self.record_tasks else 0)
        )
        workload = WorkloadRecord(
            mode="replay",
            task_set_hash="scripted",
            seed=0,
            agents=1,
            tasks=tasks,
            successes=tasks,
            scored_wall_s=wall,
            tasks_per_hour=rate,
            tasks_per_hour_low=rate * 0.9,
            tasks_per_hour_high=rate * 1.1,
            success_rate=1.0,
            success_rate_low=0.8,
            success_rate_high=1.0,
            task_records=records,
        )
        result = TrialResult(
            n, t.request.spec, (start,), workload, pruned=tasks < t.total, wall_s=wall
        )
        return Finished(t.slot, n, result)

    def progress(self) -> dict[int, Progress]:
        """Tasks done so far by each running trial, at the simulated clock."""
        out = {}
        for number, t in self._live.items():
            done = t.done_at(self.clock)
            elapsed = max(0.0, self.clock - t.started - t.run.startup_s)
            out[number] = Progress(
                state="workload" if done or elapsed else "starting",
                tasks_done=done,
                tasks_total=t.total,
                successes=done,
                elapsed_s=elapsed,
                tasks_per_hour=done * 3600.0 / elapsed if elapsed > 0 and done else None,
            )
        return out

    def request_stop(self, trial_number: int) -> None:
        """Stop after the task that is running now."""
        t = self._live.get(trial_number)
        if t is not None and t.stop_at_task is None:
            t.stop_at_task = min(t.total, t.done_at(self.clock) + 1)

    def now(self) -> float:
        """The simulated clock."""
        return self.clock

    def close(self) -> None:
        """Forget running trials."""
        self._live.clear()
