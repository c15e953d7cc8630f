"""Progress as plain lines, for output that is not a terminal (a file, nohup, CI, a log).

On a terminal `tuner optimize` and `tuner confirm` redraw a live table
(`tuner.study.search.display`); anywhere else that table would print nothing useful, so each event
becomes one flushed line:

    [0:00:00] estimate: about 37 min for 13 server runs (6 trials + up to 7 confirmation runs), ...
    [0:00:02] trial 0 (baseline) started: none kv 2.0GB seqs 8
    [0:00:44] trial 0 server ready: 86,784 KV cache tokens, started in 41.9 s
    [0:02:50] trial 0 scored: 538 completed tasks/h [451, 640], 12 tasks, run 168 s
    [0:02:50] ETA: about 31 min left (11 server runs to go at 168 s a run, measured)
    [0:05:31] trial 3 pruned after 5 of 12 tasks: 210 completed tasks/h so far, clearly below ...
    [0:20:10] confirmation round 1 of 3 done

While a trial runs, a line at least every `TUNER_PROGRESS_INTERVAL_S` seconds (default 60)
repeats what its worker says it is doing (`heartbeat_line`), so a log never stays silent
through a slow server start or a long scored window:

    [0:01:00] trial 0 server starting: 58 s, vLLM says: warm-up: compiling for the batch shapes
    [0:03:00] trial 0 scoring: 61 s, 5 of 12 tasks done, 2 agents, 1,234 prompt tok/s and 41 ...
    [0:04:00] trial 0 plain benchmark: 12 s, 1 and 8 streams

The estimate at the start comes from the preset (its tasks, agents, warm-up) and a per-run cost
measured on the reference machines (`CPU_COST`, `GPU_COST`); it is an estimate and says so. After
the first run finishes the ETA is measured: the mean wall time of this command's finished runs.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr, is_infeasible
from tuner.results.words import mode_line, tph_label
from tuner.workload.reuse import reuse_suffix

__all__ = [
    "CPU_COST",
    "GPU_COST",
    "ProgressLines",
    "RunCost",
    "calibrated_run_s",
    "clock",
    "estimate_line",
    "eta_line",
    "finished_line",
    "heartbeat_line",
    "interrupted_line",
    "minutes",
    "planned_run_s",
    "ready_line",
    "run_estimate_s",
    "started_line",
    "workload_line",
]


@dataclass(frozen=True)
class RunCost:
    """What one server run costs on a kind of machine, apart from the preset's task count.

    Attributes:
        startup_s: From `vllm serve` to a healthy server.
        agent_s_per_task: Seconds one agent spends on one task (warm-up tasks included).
        after_s: The correctness probe, the plain benchmark and the stop, after the workload.
        source: Where the figures were measured.
    """

    startup_s: float
    agent_s_per_task: float
    after_s: float
    source: str


# Medians of the 16 runs recorded in benchmarks/data/grid-smollm2-135m-cpu.json (2 cores, the
# smollm2-135m CPU preset: 12 + 1 tasks, 2 agents): startup 42.1 s, workload 79.2 s (13 tasks
# x 12.2 agent-seconds / 2 agents), wall 168.2 s, so 46.9 s after the workload.
CPU_COST = RunCost(42.1, 12.2, 46.9, "the smollm2-135m CPU runs of benchmarks/data/grid-*.json")
# The 4-trial H200 study of docs/gpu-validation.md (tiny-hybrid-mtp, 112 + 4 tasks, 4 agents):
# ready in 44-67 s, 84 s scored windows. A real checkpoint starts and decodes slower.
GPU_COST = RunCost(60.0, 3.0, 30.0, "a tiny test model on one H200 (docs/gpu-validation.md)")


def preset_cost(preset: Any) -> RunCost:
    """The run cost the estimate starts from: the preset's own recorded run of this model on
    this GPU when it has one, else the CPU grid's or (a guess) a tiny model's on an H200."""
    recorded = getattr(preset, "recorded_run", None)
    if recorded is not None:
        return RunCost(
            recorded.startup_s,
            recorded.agent_s_per_task,
            recorded.after_s,
            f"this model's recorded runs ({recorded.source})",
        )
    return CPU_COST if preset.gpu.cpu else GPU_COST


def warm_startup_s(preset: Any) -> float:
    """A start of a config that started before (vLLM's compile cache): the preset's record,
    else the first start's (nothing known says it is shorter)."""
    recorded = getattr(preset, "recorded_run", None)
    if recorded is not None and recorded.warm_startup_s is not None:
        return float(recorded.warm_startup_s)
    return preset_cost(preset).startup_s


def run_estimate_s(preset: Any) -> float:
    """Seconds one trial of `preset` is expected to take: startup + tasks / agents + after."""
    cost = preset_cost(preset)
    w = preset.workload
    tasks = w.tasks + w.warmup_tasks
    return cost.startup_s + tasks * cost.agent_s_per_task / w.agents + cost.after_s


def calibrated_run_s(preset: Any, calibration: Any) -> float:
    """Seconds one trial is expected to take on this box, from the study's calibration.

    Its first server's start, the chosen workload's estimated window stretched to the warm-up
    tasks, and the plain benchmark's tokens at the decode rate measured there.
    """
    w = calibration.settings
    workload = calibration.estimate_s * (w.tasks + w.warmup_tasks) / max(w.tasks, 1)
    streams = preset.throughput_streams
    plain = sum(max(preset.throughput_requests, n) for n in streams)
    after = plain * preset.throughput_output_tokens / max(calibration.decode_tps, 1e-9)
    return calibration.startup_s + workload + after


def planned_run_s(
    preset: Any, *, calibration: Any = None, window_s: float | None = None
) -> tuple[float, str] | None:
    """One run's seconds before this command measured one, and where the figure comes from.

    The study's calibration (this box, its first server); else, on a study whose first server
    will size the workload to `window_s`, the preset's start and plain benchmark with the
    workload at most that window; else the preset's figures. None on a GPU preset without a
    recorded run of its model: a tiny model's start on an H200 is several times shorter than
    a real checkpoint's, so it is no plan's basis (`--budget`'s first run measures it).
    """
    if calibration is not None:
        return calibrated_run_s(preset, calibration), (
            f"calibrated on this study's trial {calibration.trial_number}"
        )
    cost = preset_cost(preset)
    if not preset.gpu.cpu and getattr(preset, "recorded_run", None) is None:
        return None
    w = preset.workload
    if window_s is not None:
        tasks = w.tasks + w.warmup_tasks
        workload = min(tasks * cost.agent_s_per_task / w.agents, window_s * tasks / w.tasks)
        return (
            cost.startup_s + workload + cost.after_s,
            f"the preset's estimate, as measured on {cost.source}, the workload at most the "
            f"{window_s:.0f} s window",
        )
    return run_estimate_s(preset), f"the preset's estimate, as measured on {cost.source}"


def minutes(seconds: float) -> str:
    """A duration for a person: "45 s", "about 7 min", "about 1 h 20 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    total = round(seconds / 60)
    if total < 60:
        return f"about {total} min"
    return f"about {total // 60} h {total % 60} min"


def clock(seconds: float) -> str:
    """Elapsed time as H:MM:SS."""
    s = max(0, int(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _runs(n: int) -> str:
    return f"{n} server run" + ("" if n == 1 else "s")


def planned_runs(
    n_trials: int,
    *,
    k: int,
    rounds: int,
    confirm: bool,
    baseline_every: int,
    candidates: int | None = None,
    floor: bool = True,
) -> tuple[int, int]:
    """(baseline re-runs, confirmation runs at most) that a study of `n_trials` plans.

    The re-runs are the search's (`roles.search_reruns`). The confirmation's round 0 begins
    with the floor start (the baseline's second start, which `--confirm 0` runs too, once the
    study has a candidate); then each of `rounds` rounds runs the baseline and the top `k`
    candidates, fewer rounds when it stops early. `candidates`: how many the study will have
    to choose from (a new study: `n_trials - 1`, the baseline being trial 0); None when not
    known (a study that already has trials): `k` finalists are assumed. `floor`: whether
    `--confirm 0` runs the floor start (`confirm.floor_start_needed`: not on dummy weights).
    """
    from tuner.study.search.roles import search_reruns

    reruns = search_reruns(n_trials, baseline_every)
    finalists = k if candidates is None else min(k, max(candidates, 0))
    if finalists == 0:
        return reruns, 0
    if not confirm:
        return reruns, 1 if floor else 0
    return reruns, (finalists + 1) * rounds


def estimate_line(
    preset: Any,
    trials: int,
    confirm_runs: int,
    *,
    reruns: int = 0,
    calibration: Any = None,
    window_s: float | None = None,
) -> str:
    """The whole command's expected time before anything ran in this command.

    Args:
        preset: The preset.
        trials, confirm_runs: Server runs of the search and of the confirmation (the most it
            may run: the floor start and every round).
        reruns: The baseline's re-runs during the search (`roles.search_reruns`).
        calibration: The study's calibration (`tuner.workload.calibration.Calibration`): the
            estimate is this box's, from its first server.
        window_s: The study is not calibrated yet and will size its workload to this window
            on its first server: the estimate is a preset guess bounded by it.
    """
    runs = trials + reruns + confirm_runs
    slots = max(1, preset.gpu.slots)
    parts = [f"{trials} trials" if trials else ""]
    parts.append(f"{reruns} baseline re-run{'' if reruns == 1 else 's'}" if reruns else "")
    parts.append(
        f"up to {confirm_runs} confirmation run{'' if confirm_runs == 1 else 's'}"
        if confirm_runs
        else ""
    )
    what = " + ".join(p for p in parts if p)
    at_once = f", {slots} at a time" if slots > 1 else ""
    w = preset.workload
    cost = preset_cost(preset)
    if calibration is not None:
        per_run = calibrated_run_s(preset, calibration)
        c = calibration
        return (
            f"estimate: {minutes(math.ceil(runs / slots) * per_run)} for {_runs(runs)} "
            f"({what}{at_once}), about {per_run:.0f} s a run ({c.sizing} with {w.agents} agents,"
            f" calibrated on this study's trial {c.trial_number}: started in {c.startup_s:.0f} s,"
            f" prefill {c.prefill_tps:,.0f} tok/s, decode {c.decode_tps:,.1f} tok/s); the "
            "measured ETA follows the first run"
        )
    if window_s is not None:
        tasks = w.tasks + w.warmup_tasks
        workload = min(tasks * cost.agent_s_per_task / w.agents, window_s * tasks / w.tasks)
        per_run = cost.startup_s + workload + cost.after_s
        return (
            f"estimate: {minutes(math.ceil(runs / slots) * per_run)} for {_runs(runs)} "
            f"({what}{at_once}), about {per_run:.0f} s a run (a server start and the plain "
            f"benchmark as measured on {cost.source}, the workload at most the {window_s:.0f} s "
            "window the first server sizes it to); an estimate from the preset, a guess until "
            "the first server is calibrated: the measured ETA follows the first run"
        )
    per_run = run_estimate_s(preset)
    # Re-runs and confirmation runs repeat a config that started before: vLLM's compile cache.
    warm = per_run - cost.startup_s + warm_startup_s(preset)
    repeats = reruns + confirm_runs
    total = math.ceil(trials / slots) * per_run + math.ceil(repeats / slots) * warm
    warm_part = (
        f", {warm:.0f} s a repeated config's run (compile cache)"
        if repeats and round(warm) != round(per_run)
        else ""
    )
    return (
        f"estimate: {minutes(total)} for {_runs(runs)} ({what}{at_once}), about "
        f"{per_run:.0f} s a run{warm_part} ({w.tasks + w.warmup_tasks} tasks with {w.agents} "
        f"agents, a server start and the plain benchmark, as measured on {cost.source}); an "
        "estimate from the preset: the measured ETA follows the first run"
    )


def workload_line(preset: Any) -> str:
    """What each trial runs and what its score means in this mode."""
    from tuner.results.configs import MODE_NOTES

    w = preset.workload
    mode = "traces" if w.traces else w.mode
    return (
        f"workload: {mode_line(mode, MODE_NOTES.get(mode), w.traces)}; {w.tasks} scored tasks "
        f"with {w.agents} agents, scored in {tph_label(mode)}"
    )


def eta_line(left: int, slots: int, durations: list[float], *, at_most: bool = False) -> str:
    """The measured ETA: runs left x this command's mean run time, `slots` at a time;
    `at_most`: `left` is a cap (a sequential confirmation may stop sooner)."""
    per_run = sum(durations) / len(durations)
    if left <= 0:
        return f"ETA: no server run left (measured {per_run:.0f} s a run)"
    total = math.ceil(left / max(1, slots)) * per_run
    cap, up_to = ("at most ", "up to ") if at_most else ("", "")
    return (
        f"ETA: {cap}{minutes(total)} left ({up_to}{_runs(left)} to go at {per_run:.0f} s a "
        f"run, measured over {_runs(len(durations))} of this command)"
    )


def _who(number: int, user_attrs: dict[str, Any]) -> str:
    role = user_attrs.get(TrialAttr.ROLE)
    if role == Role.CONFIRM:
        of = user_attrs.get(TrialAttr.CONFIRM_OF)
        r = user_attrs.get(TrialAttr.CONFIRM_ROUND)
        where = f", round {int(r) + 1}" if r is not None else ""
        return f"trial {number} (confirmation of #{of}{where})"
    if role in (Role.BASELINE, Role.CONTROL):
        return f"trial {number} ({role})"
    if role == Role.BASELINE_RERUN:
        return f"trial {number} (baseline again: drift check, not counted)"
    return f"trial {number}"


def started_line(number: int, user_attrs: dict[str, Any], label: str) -> str:
    """A trial was handed to a worker."""
    return f"{_who(number, user_attrs)} started: {label}"


def ready_line(number: int, kv_cache_tokens: int | None, startup_s: float | None) -> str:
    """Its server answered /health."""
    kv = (
        f"{kv_cache_tokens:,} KV cache tokens"
        if kv_cache_tokens is not None
        else "KV cache size not reported"
    )
    took = f", started in {startup_s:.1f} s" if startup_s is not None else ""
    return f"trial {number} server ready: {kv}{took}"


def _interval(attrs: dict[str, Any]) -> str:
    low, high = attrs.get(TrialAttr.TASKS_PER_HOUR_LOW), attrs.get(TrialAttr.TASKS_PER_HOUR_HIGH)
    return f" [{low:,.0f}, {high:,.0f}]" if low is not None and high is not None else ""


def _first(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0][:300] if lines else "no reason recorded"


def finished_line(trial: FrozenTrial, mode: str | None, tasks_total: int | None = None) -> str:
    """What a finished trial came to, in one line: scored, pruned, infeasible or failed."""
    attrs = dict(trial.user_attrs)
    who = _who(trial.number, attrs)
    label = tph_label(mode)
    wall = (attrs.get(TrialAttr.TIMING) or {}).get("worker_wall_s")
    took = f", run {wall:.0f} s" if isinstance(wall, (int, float)) else ""
    if is_infeasible(trial):
        return f"{who} infeasible: {_first(attrs.get(TrialAttr.FAILURE_REASON))}{took}"
    of = f" of {tasks_total}" if tasks_total else ""
    screened = attrs.get(TrialAttr.SCREENED_OUT_AT)
    if trial.state == TrialState.PRUNED and isinstance(screened, dict):
        return (
            f"{who} screened out at rung {screened.get('rung')} after {screened.get('tasks')}"
            f"{of} tasks: at most {screened.get('optimistic_tasks_per_hour', 0):,.0f} {label} "
            f"against the best trial's {screened.get('best_tasks_per_hour', 0):,.0f} on the "
            f"same tasks{took}"
        )
    if trial.state == TrialState.PRUNED:
        done = attrs.get(TrialAttr.PRUNED_AT_TASKS)
        rate = attrs.get(TrialAttr.TASKS_PER_HOUR)
        so_far = f": {rate:,.0f} {label} so far" if rate is not None else ""
        return (
            f"{who} pruned after {done}{of} tasks{so_far}, clearly below the baseline's pace "
            f"at the same point{took}"
        )
    if trial.state == TrialState.FAIL:
        kind = attrs.get(TrialAttr.FAILURE_KIND) or "failed"
        return f"{who} failed ({kind}): {_first(attrs.get(TrialAttr.FAILURE_REASON))}{took}"
    value = attrs.get(TrialAttr.TASKS_PER_HOUR, trial.value)
    score = f"{value:,.0f} {label}{_interval(attrs)}" if value is not None else "no score"
    rung = attrs.get(TrialAttr.RUNG)
    passed = f", passed screening rung {rung}" if rung is not None else ""
    return f"{who} scored: {score}{took}{passed}{reuse_suffix(attrs)}"


def heartbeat_line(number: int, state: str, seconds: float) -> str:
    """A running trial's phase (the worker's words: "phase" or "phase: detail") and how long
    it has been in that phase."""
    phase, _, detail = state.partition(": ")
    detail = f", {detail}" if detail else ""
    return f"trial {number} {_phase(phase)}: {seconds:.0f} s{detail}"


def _phase(state: str) -> str:
    # A trial whose worker has not said anything yet is starting its server.
    return "server starting" if state == "starting" else state


def interrupted_line(trials: list[tuple[int, dict[str, Any], str]], resume: str) -> str:
    """What Ctrl-C stopped (trial number, its user attributes, its config label), that it goes
    back to the queue, and the command that resumes."""
    if not trials:
        what = "no trial was running"
    else:
        names = [f"{_who(n, attrs)} ({label})" for n, attrs, label in trials]
        one = len(names) == 1
        what = (
            f"{' and '.join(names)} {'stops' if one else 'stop'} and "
            f"{'goes' if one else 'go'} back to the queue"
        )
    return f"interrupted: {what}; resume with: {resume} (Ctrl-C again quits at once)"


def _interval_s() -> float:
    from tuner.settings import get_settings

    return get_settings().progress_interval_s


@dataclass
class ProgressLines:
    """Writes one flushed line per study event to `stream` (stdout by default)."""

    stream: TextIO = field(default_factory=lambda: sys.stdout)
    now: Callable[[], float] = time.monotonic
    # Runs planned after the search, at most (the confirmation's): added to the search's ETA;
    # in the queued stages that follow (`queued_stage`) each finished run uses one up.
    later_runs: int = 0
    queued_stage: bool = False
    confirm_cap: int | None = None  # the confirmation's cap on rounds, when this command has one
    durations: list[float] = field(default_factory=list)
    # A running trial says what it does at least this often (TUNER_PROGRESS_INTERVAL_S).
    interval_s: float = field(default_factory=_interval_s)

    def __post_init__(self) -> None:
        self._t0 = self.now()
        self._started: dict[int, float] = {}
        self._last: dict[int, float] = {}  # when each running trial's last line was said
        self._phases: dict[int, tuple[str, float]] = {}  # its phase and since when

    def say(self, text: str) -> None:
        """One line, prefixed with the time since the command started, flushed."""
        print(f"[{clock(self.now() - self._t0)}] {text}", file=self.stream, flush=True)

    def started(self, number: int, user_attrs: dict[str, Any], label: str) -> None:
        """A trial went to a worker."""
        now = self.now()
        self._started[number] = self._last[number] = now
        self._phases[number] = ("server starting", now)
        self.say(started_line(number, user_attrs, label))

    def ready(self, number: int, kv_cache_tokens: int | None, startup_s: float | None) -> None:
        """A trial's server is up."""
        self._last[number] = self.now()
        self.say(ready_line(number, kv_cache_tokens, startup_s))

    def heartbeat(self, number: int, state: str) -> None:
        """A running trial's latest state; said when `interval_s` passed since its last line."""
        now = self.now()
        phase = _phase(state.partition(": ")[0])
        if self._phases.get(number, ("", 0.0))[0] != phase:
            self._phases[number] = (phase, now)
        if now - self._last.setdefault(number, now) < self.interval_s:
            return
        self._last[number] = now
        self.say(heartbeat_line(number, state, now - self._phases[number][1]))

    def finished(
        self, trial: FrozenTrial, mode: str | None, tasks_total: int | None, *, counted: bool
    ) -> None:
        """A trial came back; `counted`: it was a full run (a re-queued crash is not)."""
        self.say(finished_line(trial, mode, tasks_total))
        self._last.pop(trial.number, None)
        self._phases.pop(trial.number, None)
        start = self._started.pop(trial.number, None)
        if counted and start is not None:
            self.durations.append(self.now() - start)
        if counted and self.queued_stage:
            self.later_runs = max(0, self.later_runs - 1)

    def eta(self, left_in_stage: int, slots: int) -> None:
        """The measured ETA, once a run has finished in this command.

        In the search: its runs left and the runs planned after it. In a queued stage (the
        floor start, a confirmation round): the queued runs, or the planned runs not yet used
        when more (a later round may still be queued), as a cap."""
        if not self.durations:
            return
        if not self.queued_stage:
            self.say(eta_line(left_in_stage + self.later_runs, slots, self.durations))
            return
        left = max(left_in_stage, self.later_runs)
        self.say(eta_line(left, slots, self.durations, at_most=left > left_in_stage))
