"""A `tuner.study.trial.backend.TrialBackend` that answers from the recorded grid on a simulated
clock.

The study loop submits trials as it would to Ray workers; each gets a noisy replayed run of its
config (`_grid_replay.GridTable.replay`). `wait()` jumps the clock to the next event — a scored task
finishing, or a trial coming back — so the loop's pruner sees every task as it would live, and a
stop request ends the trial the way a worker does: tasks already running finish, no new one
starts, no plain benchmark. Results are real `TrialResult`s scored by tuner's own `score_tasks`,
with the suite's task ids, so `tuner export`'s paired rule pairs them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from benchmarks._grid_replay import GridTable, SimRun
from tuner.metrics.scoring import score_tasks
from tuner.records import TaskRecord, WorkloadRecord
from tuner.study.space import config_key
from tuner.study.trial.backend import Finished, Progress
from tuner.study.trial.request import TrialRequest, TrialResult

__all__ = ["GridReplayBackend"]


@dataclass
class _Live:
    """A trial running on the simulated clock."""

    slot: int
    request: TrialRequest
    start: float
    sim: SimRun | None
    end: float  # when its result comes back
    events: list[tuple[float, int, int]]  # (clock time, tasks done, successes) still to come
    stop_decided: float | None = None  # seconds into the scored window
    shown: tuple[int, int] = (0, 0)  # tasks done and successes reported so far

    @property
    def window(self) -> float:
        assert self.sim is not None
        return self.start + self.sim.config.pre_s


class GridReplayBackend:
    """The backend (the module docstring says how it answers). `spans` keeps, per trial,
    (start, end) on the clock: the GPU-seconds a study spent by any moment follow from it."""

    def __init__(
        self, table: GridTable, slots: int, rng: random.Random, drift_per_h: float = 0.0
    ) -> None:
        self.table, self._slots, self.rng = table, slots, rng
        # The machine's drift: log tasks/h moves by drift_per_h an hour of the study's clock.
        self.drift_per_h = drift_per_h
        self.clock = 0.0
        self.live: dict[int, _Live] = {}
        self.spans: dict[int, tuple[float, float]] = {}
        self.sims: dict[int, SimRun] = {}

    @property
    def slots(self) -> int:
        return self._slots

    def ready(self, slot: int) -> bool:
        """Every replayed slot is always placed."""
        return True

    def submit(self, slot: int, request: TrialRequest) -> None:
        shift = -self.drift_per_h * self.clock / 3600.0  # slower (longer tasks) as tasks/h falls
        sim = self.table.replay(request.params, self.rng, shift)
        if sim is None:
            c = self.table.configs[config_key(request.params)]
            run = _Live(slot, request, self.clock, None, self.clock + c.failed_wall_s, [])
        else:
            run = _Live(slot, request, self.clock, sim, self.clock + sim.cost_s(), [])
            run.events = [(run.window + t, d, w) for t, d, w in sim.progress()]
        self.live[request.trial_number] = run

    def wait(self, timeout_s: float) -> list[Finished]:
        if not self.live:
            self.clock += timeout_s
            return []
        times = [r.end for r in self.live.values()]
        times += [r.events[0][0] for r in self.live.values() if r.events]
        self.clock = max(self.clock, min(times))
        for run in self.live.values():
            while run.events and run.events[0][0] <= self.clock:
                _, done, wins = run.events.pop(0)
                run.shown = (done, wins)
        done_ = [n for n, run in self.live.items() if run.end <= self.clock]
        return [self._finish(n) for n in done_]

    def progress(self) -> dict[int, Progress]:
        out = {}
        for n, run in self.live.items():
            if run.sim is None or self.clock < run.window:
                out[n] = Progress(state="starting")
                continue
            elapsed = self.clock - run.window
            done, wins = run.shown
            rate = wins * 3600.0 / elapsed if elapsed > 0 else 0.0
            total = len(run.sim.task_ids)
            out[n] = Progress("workload", done, total, wins, elapsed, rate)
        return out

    def request_stop(self, trial_number: int) -> None:
        run = self.live.get(trial_number)
        if run is None or run.sim is None or run.stop_decided is not None:
            return
        decided = max(0.0, self.clock - run.window)
        run.stop_decided = decided
        run.end = min(run.end, run.start + run.sim.cost_s(decided))
        # Only tasks already started finish; the rest never run, so never report.
        _, ran = run.sim.stopped_at(decided)
        run.events = [
            (run.window + t, d, w) for t, d, w in run.sim.progress(ran) if d > run.shown[0]
        ]

    def now(self) -> float:
        return self.clock

    def close(self) -> None:
        self.live.clear()

    def _finish(self, number: int) -> Finished:
        run = self.live.pop(number)
        self.spans[number] = (run.start, run.end)
        if run.sim is not None:
            self.sims[number] = run.sim
        return Finished(run.slot, number, _result(run, self.table))


def _result(run: _Live, table: GridTable) -> TrialResult:
    req, workload = run.request, table.preset.workload
    wall = run.end - run.start
    if run.sim is None:
        # The recorded failure, as recorded: an infeasible config teaches the sampler through
        # its constraint, a crash fails the trial.
        failed = table.configs[config_key(req.params)]
        return TrialResult(
            trial_number=req.trial_number,
            spec=req.spec,
            failure_kind=failed.failure_kind,
            failure_reason=f"recorded: {failed.failure_kind}",
            infeasible=failed.infeasible,
            wall_s=wall,
        )
    sim, c = run.sim, run.sim.config
    if run.stop_decided is None:
        ran, window = list(range(len(sim.ends))), sim.scored_wall_s
    else:
        window, ran = sim.stopped_at(run.stop_decided)
    records = [
        TaskRecord(
            index=i,
            task_id=sim.task_ids[i],
            template=table.task_idents[i][0],
            seed=table.task_idents[i][1],
            warmup=False,
            success=sim.success[i],
            failure_reason=None if sim.success[i] else "replayed failure",
            started_s=sim.starts[i],
            wall_s=sim.durations[i],
        )
        for i in ran
    ]
    # The tasks/h is exact; its one-run bootstrap interval is only printed by `tuner export`
    # (the export rule pairs runs, the pruner uses a Poisson bound), so 200 resamples do.
    score = score_tasks(records, window, seed=workload.seed, resamples=200)
    record = WorkloadRecord.from_score(
        score,
        mode=workload.mode,
        task_set_hash="replayed",
        seed=workload.seed,
        agents=workload.agents,
        task_records=records,
        output_tokens_per_s=None,  # replayed tasks have no steps: no tokens were measured
    )
    return TrialResult(
        trial_number=req.trial_number,
        spec=req.spec,
        workload=record,
        pruned=run.stop_decided is not None,
        wall_s=wall,
        startup_s=c.pre_s,
        workload_s=window,
        throughput_s=0.0 if run.stop_decided is not None else c.throughput_s,
    )
