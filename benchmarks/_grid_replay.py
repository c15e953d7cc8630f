"""The recorded grid as a trial backend: replayed trials on a simulated clock.

`benchmarks/record_grid.py` evaluated every configuration of a trimmed CPU space for real; this
module turns that table into trials a study can run again, with noise, in microseconds:

- **Outcomes.** A replayed trial plays the same scored task ids as the recording (the suite is
  fixed), so paired comparisons still pair. Each task's duration is the config's recorded one
  times the run-to-run noise; its success is the recorded success of that task in one of the
  config's runs, drawn at random.
- **Noise.** Learned from the configurations recorded several times: the log-duration of a task
  in one run splits into the config's mean for that task, a factor shared by the whole run (load
  on the box) and a per-task residual. A replayed run draws one recorded run factor and one
  recorded residual per task (resampling, scaled by sqrt(n/(n-1)) because residuals from n runs
  around their own mean are that much too small). Nothing is assumed Gaussian. A grid needs
  some config recorded twice (both recorded grids have four run three times).
- **Schedule.** The workload's closed loop is re-run on the new durations: `agents` agents pull
  tasks in suite order, one at a time, so the completion times (what the pruner sees) follow.
- **Cost.** Recorded seconds: startup, warm-up, the scored window as replayed, the plain
  benchmark and the trial's remaining overhead. A pruned trial stops asking for tasks a second
  after the pruner's decision (the worker polls every second); tasks already running finish;
  it costs what it ran, without the plain benchmark. A failed start costs its recorded seconds.
- **Screening** (the shipped `ScreenRule()`, `_se_replay.DEFAULT`): the loop's own `ScreenRule`
  stops a candidate at a rung through the same stop request, so a screened-out
  trial costs its startup, warm-up and the prefix it played. The prefix is the suite's first
  tasks for every config (the replay plays the suite in order), so rungs compare paired runs.
- **Clock.** `GridReplayBackend` is the study loop's `TrialBackend`: the loop submits trials as
  it would to Ray workers, and `wait()` jumps the clock to the next event (a scored task
  finishing, or a trial coming back), so the pruner sees every task as it would live. Results
  are real `TrialResult`s scored by tuner's own `score_tasks`, with the suite's task ids, so
  `tuner export`'s paired rule pairs them.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from tuner.metrics.scoring import score_tasks
from tuner.records import TaskRecord, WorkloadRecord
from tuner.study.search.sampling import enumerate_space
from tuner.study.space import Preset, config_key
from tuner.study.trial.backend import Finished, Progress
from tuner.study.trial.request import TrialRequest, TrialResult
from tuner.workload import build_task_set

DATA = Path(__file__).resolve().parent / "data" / "grid-smollm2-135m-cpu.json"
LARGE_DATA = DATA.with_name("grid-smollm2-135m-cpu-large.json")
STOP_LATENCY_S = 1.0  # the worker's stop poller asks the hub once a second


@dataclass(frozen=True)
class ConfigRecord:
    """One configuration's recorded runs, reduced to what a replay needs."""

    key: str
    params: dict[str, Any]
    failure_kind: str | None
    infeasible: bool
    fixed_s: float  # startup + warm-up + overhead (everything but the scored window and bench)
    pre_s: float  # from the trial's start to its scored window: startup and warm-up
    throughput_s: float
    failed_wall_s: float  # what a failed start cost
    log_mean: tuple[float, ...]  # per scored task: mean log duration over runs
    successes: tuple[tuple[int, ...], ...]  # per run, per task
    tasks_per_hour: float  # mean over runs (the "true" value of the config)

    @property
    def ok(self) -> bool:
        """The server started and the workload ran."""
        return self.failure_kind is None


@dataclass(frozen=True)
class NoiseModel:
    """Resampled run factors and per-task residuals, in log-duration."""

    run_factors: tuple[float, ...]
    residuals: tuple[float, ...]
    run_scale: float = 1.0  # `GridTable.with_run_sd`: the run factors rescaled to a measured sd

    @property
    def learned(self) -> bool:
        """True when some config was recorded more than once (else a replay has no noise)."""
        return bool(self.run_factors)

    def draw(self, rng: random.Random, n: int) -> list[float]:
        """Log multipliers for `n` tasks of one run."""
        if not self.run_factors:
            return [0.0] * n
        f = rng.choice(self.run_factors) * self.run_scale
        return [f + rng.choice(self.residuals) for _ in range(n)]


@dataclass(frozen=True)
class SimRun:
    """One replayed trial: its scored tasks and when each finished."""

    config: ConfigRecord
    task_ids: tuple[str, ...]
    success: tuple[bool, ...]
    durations: tuple[float, ...]
    starts: tuple[float, ...]
    ends: tuple[float, ...]

    @property
    def scored_wall_s(self) -> float:
        """The scored window: until the last task finished."""
        return max(self.ends, default=0.0)

    @property
    def tasks_per_hour(self) -> float:
        """Successes x 3600 / window."""
        wall = self.scored_wall_s
        return sum(self.success) * 3600.0 / wall if wall > 0 else 0.0

    def progress(self, ran: list[int] | None = None) -> list[tuple[float, int, int]]:
        """(seconds into the window, tasks done, successes) after each task of `ran` (all)."""
        tasks = range(len(self.ends)) if ran is None else ran
        order = sorted(tasks, key=lambda i: self.ends[i])
        out, wins = [], 0
        for done, i in enumerate(order, start=1):
            wins += self.success[i]
            out.append((self.ends[i], done, wins))
        return out

    def stopped_at(self, decided_s: float) -> tuple[float, list[int]]:
        """Window end and the tasks finished when a stop is asked `decided_s` into it."""
        asked = decided_s + STOP_LATENCY_S
        ran = [i for i, s in enumerate(self.starts) if s < asked]
        end = max((self.ends[i] for i in ran), default=asked)
        return end, ran

    def cost_s(self, decided_s: float | None = None) -> float:
        """Seconds the trial takes in full, or when stopped by a decision `decided_s` in."""
        if decided_s is None:
            return self.config.fixed_s + self.scored_wall_s + self.config.throughput_s
        end, _ = self.stopped_at(decided_s)
        return self.config.fixed_s + end


def closed_loop(durations: list[float], agents: int) -> tuple[list[float], list[float]]:
    """Start and end of each task when `agents` agents pull them in order, one at a time."""
    free = [0.0] * max(1, agents)
    starts, ends = [], []
    for d in durations:
        k = min(range(len(free)), key=lambda j: (free[j], j))
        starts.append(free[k])
        free[k] += d
        ends.append(free[k])
    return starts, ends


class GridTable:
    """The recorded grid: configurations, the preset they came from, and the noise."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.preset = Preset.model_validate(data["preset"])
        tasks = build_task_set(self.preset.workload)
        self.task_ids = tuple(t.task_id for t in tasks)
        self.task_idents = tuple((t.template, t.seed) for t in tasks)
        by_key: dict[str, list[dict[str, Any]]] = {}
        for run in data["runs"]:
            by_key.setdefault(config_key(run["params"]), []).append(run)
        configs = {k: self._reduce(k, runs) for k, runs in by_key.items()}
        space = enumerate_space(self.preset) or []
        keys = {config_key(p) for p in space}
        self.configs = {k: c for k, c in configs.items() if k in keys}
        self.noise = self._noise(by_key)
        # The grid "in order": as the recorder enumerates it (record_grid.grid).
        self.order = sorted(self.configs, key=lambda k: _grid_rank(json.loads(k)))

    def missing(self) -> list[dict[str, Any]]:
        """Configs of the preset's space with no recorded run (a replay needs all of them)."""
        space = enumerate_space(self.preset) or []
        return [p for p in space if config_key(p) not in self.configs]

    @classmethod
    def load(cls, path: Path = DATA) -> GridTable:
        """Read the JSON the recorder wrote."""
        return cls(json.loads(path.read_text()))

    def _reduce(self, key: str, runs: list[dict[str, Any]]) -> ConfigRecord:
        ok = [r for r in runs if r["failure_kind"] is None and r.get("tasks")]
        first = runs[0]
        if not ok:
            return ConfigRecord(
                key, first["params"], first["failure_kind"] or "no_tasks",
                bool(first["infeasible"]), 0.0, 0.0, 0.0, fmean(r["wall_s"] for r in runs),
                (), (), 0.0,
            )  # fmt: skip
        n = len(ok[0]["tasks"])
        log_mean = tuple(fmean(math.log(max(r["tasks"][i][2], 1e-3)) for r in ok) for i in range(n))
        fixed = fmean(r["wall_s"] - r["scored_wall_s"] - r["throughput_s"] for r in ok)
        return ConfigRecord(
            key=key,
            params=first["params"],
            failure_kind=None,
            infeasible=False,
            fixed_s=fixed,
            pre_s=fmean(r["startup_s"] + r["warmup_s"] for r in ok),
            throughput_s=fmean(r["throughput_s"] for r in ok),
            failed_wall_s=0.0,
            log_mean=log_mean,
            successes=tuple(tuple(t[0] for t in r["tasks"]) for r in ok),
            tasks_per_hour=fmean(r["tasks_per_hour"] for r in ok),
        )

    @staticmethod
    def _noise(by_key: dict[str, list[dict[str, Any]]]) -> NoiseModel:
        factors: list[float] = []
        residuals: list[float] = []
        for runs in by_key.values():
            ok = [r for r in runs if r["failure_kind"] is None and r.get("tasks")]
            if len(ok) < 2:
                continue
            n_runs = len(ok)
            logs = [[math.log(max(t[2], 1e-3)) for t in r["tasks"]] for r in ok]
            n = len(logs[0])
            task_mean = [fmean(row[i] for row in logs) for i in range(n)]
            inflate = math.sqrt(n_runs / (n_runs - 1))
            for row in logs:
                dev = [row[i] - task_mean[i] for i in range(n)]
                f = fmean(dev)
                factors.append(f * inflate)
                residuals.extend((d - f) * inflate for d in dev)
        return NoiseModel(tuple(factors), tuple(residuals))

    # ---- what a study needs ------------------------------------------------------------------

    def with_run_sd(self, sd: float, seed: int = 0) -> GridTable:
        """A copy whose replayed runs scatter (log tasks/h, between starts) by `sd` in all.

        The grid's run factors come from configs repeated 1-2 hours apart, so they hold the
        box's drift; a fitted run sd (`grid_truth.py`'s sigma, drift modelled apart) is the
        scatter of starts minutes apart. The run factors are rescaled so that factor and task
        residuals together give `sd`; the task residuals (each task's scatter within a run,
        which screening's rungs see) stay as recorded."""
        import copy

        if not self.noise.learned:
            return self
        rng = random.Random(seed)
        base = self.configs[config_key(self.preset.baseline_params())]
        bare = NoiseModel((0.0,), self.noise.residuals)
        logs = []
        for _ in range(400):
            noise = bare.draw(rng, len(base.log_mean))
            durations = [math.exp(m + e) for m, e in zip(base.log_mean, noise, strict=True)]
            logs.append(-math.log(max(closed_loop(durations, self.preset.workload.agents)[1])))
        mean = fmean(logs)
        task_var = fmean((x - mean) ** 2 for x in logs)
        factor_var = fmean(f * f for f in self.noise.run_factors)
        scale = math.sqrt(max(0.0, sd * sd - task_var) / factor_var) if factor_var else 0.0
        out = copy.copy(self)
        out.noise = NoiseModel(self.noise.run_factors, self.noise.residuals, scale)
        return out

    def grid_cost_s(self) -> float:
        """Every configuration run once in full: what the grid costs."""
        return sum(
            c.fixed_s + self._nominal_window(c) + c.throughput_s if c.ok else c.failed_wall_s
            for c in self.configs.values()
        )

    def _nominal_window(self, c: ConfigRecord) -> float:
        _, ends = closed_loop([math.exp(x) for x in c.log_mean], self.preset.workload.agents)
        return max(ends, default=0.0)

    def replay(
        self, params: dict[str, Any], rng: random.Random, shift: float = 0.0
    ) -> SimRun | None:
        """One noisy run of a configuration; None when it did not start (see `configs`).
        `shift`: added to every task's log duration (the machine's drift at the run's start)."""
        c = self.configs[config_key(params)]
        if not c.ok:
            return None
        n = len(c.log_mean)
        noise = self.noise.draw(rng, n)
        durations = [math.exp(m + e + shift) for m, e in zip(c.log_mean, noise, strict=True)]
        success = tuple(bool(rng.choice(c.successes)[i]) for i in range(n))
        starts, ends = closed_loop(durations, self.preset.workload.agents)
        return SimRun(c, self.task_ids, success, tuple(durations), tuple(starts), tuple(ends))


def _grid_rank(params: dict[str, Any]) -> tuple[Any, ...]:
    # record_grid.grid's order: method as listed, then depth, lookup, KV cache, max_num_seqs.
    return (
        params["method"] != "none",
        params.get("num_speculative_tokens", 0),
        params.get("prompt_lookup_min", 0),
        params.get("prompt_lookup_max", 0),
        params.get("kv_cache_memory_bytes", 0),
        params.get("max_num_seqs", 0),
    )


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
