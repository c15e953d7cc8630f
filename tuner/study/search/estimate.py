"""How long a study will take: the estimate before anything ran, and the measured ETA after.

The estimate at the start comes from the preset (its tasks, agents, warm-up) and a per-run cost
measured on the reference machines (`CPU_COST`, `GPU_COST`), or the preset's own recorded run of
its model on its GPU, or the study's calibration on this box; it is an estimate and says so.
After the first run finishes the ETA is measured: the mean wall time of this command's finished
runs (`eta_line`). `planned_run_s` is the figure `--budget` plans with; `planned_runs` counts
the baseline's re-runs and the confirmation runs a study plans. `tuner.study.search.progress`
prints these lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CPU_COST",
    "CPU_FP32_COST",
    "GPU_COST",
    "RunCost",
    "calibrated_run_s",
    "estimate_line",
    "eta_line",
    "minutes",
    "planned_run_s",
    "planned_runs",
    "preset_cost",
    "run_estimate_s",
    "runs_float32",
    "warm_startup_s",
]


@dataclass(frozen=True)
class RunCost:
    """What one server run costs on a kind of machine, apart from the preset's task count.

    Attributes:
        startup_s: From `vllm serve` to a healthy server.
        agent_s_per_task: Seconds one agent spends on one task (warm-up tasks included).
        after_s: The correctness probe, the plain benchmark and the stop, after the workload.
        source: Where the figures were measured.
        beyond_window_s: The warm-up's part that a scored window's bound does not cover (its
            shape sweeps and the calibration probe); 0 where `agent_s_per_task` holds it and
            no bound was reached when it was measured.
    """

    startup_s: float
    agent_s_per_task: float
    after_s: float
    source: str
    beyond_window_s: float = 0.0

    def window_run_s(self, workload: Any, window_s: float) -> float:
        """One run whose first server sizes the workload to at most `window_s` scored
        seconds: the start, the workload at its pace or the window (stretched to the warm-up
        tasks, plus what the warm-up adds beyond them), whichever is shorter, and the after."""
        tasks = workload.tasks + workload.warmup_tasks
        paced = tasks * self.agent_s_per_task / workload.agents
        bound = window_s * tasks / workload.tasks + self.beyond_window_s
        return float(self.startup_s + min(paced, bound) + self.after_s)


# Medians of the 16 runs recorded in benchmarks/data/grid-smollm2-135m-cpu.json (2 cores, the
# smollm2-135m CPU preset: 12 + 1 tasks, 2 agents): startup 42.1 s, workload 79.2 s (13 tasks
# x 12.2 agent-seconds / 2 agents), wall 168.2 s, so 46.9 s after the workload.
CPU_COST = RunCost(42.1, 12.2, 46.9, "the smollm2-135m CPU runs of benchmarks/data/grid-*.json")
# Where the study runs float32 (a CPU without bf16 instructions, `tuner.server.cpu.cpu_dtype`):
# the README's main command on a Zen 3 (docs/first-run-zen3.md, its two runs of 392 s and
# 360 s, read off the printed timestamps): started in 165.8 s and 123.2 s (mean 144.5), the
# workload from ready to the probe 160 s and 171 s (mean 165.5 = 13 tasks x 25.5 agent-s / 2
# agents), of which the warm-up (task, sweep, calibration probe) 51 s and 60 s, 45.5 s beyond
# the warm-up task's share of the 120 s window's bound; probe, plain benchmark and stop 66 s.
# The grid's figures above priced these runs at 173 s.
CPU_FP32_COST = RunCost(
    144.5, 25.5, 66.0, "a float32 first run on a Zen 3 (docs/first-run-zen3.md)", 45.5
)
# The 4-trial H200 study of docs/gpu-validation.md (tiny-hybrid-mtp, 112 + 4 tasks, 4 agents):
# ready in 44-67 s, 84 s scored windows. A real checkpoint starts and decodes slower.
GPU_COST = RunCost(60.0, 3.0, 30.0, "a tiny test model on one H200 (docs/gpu-validation.md)")


def runs_float32(preset: Any, cpuinfo: str | None = None) -> bool:
    """The preset's servers run float32 on this CPU: said so, or `by-cpu` on a CPU without bf16
    instructions (`tuner.study.preflight.dtype` resolves it the same way, after the plan)."""
    dtype = preset.model.dtype
    if dtype == "by-cpu":
        from tuner.server.cpu import cpu_dtype

        return cpu_dtype(cpuinfo) == "float32"
    return bool(dtype == "float32")


def preset_cost(preset: Any, cpuinfo: str | None = None) -> RunCost:
    """The run cost the estimate starts from: the preset's own recorded run of this model on
    this GPU when it has one, else the CPU's record for the dtype it runs (bf16: the grid's;
    float32: a Zen 3's first run) or (a guess) a tiny model's on an H200. `cpuinfo`: the text
    of /proc/cpuinfo, for a `by-cpu` preset (read when None)."""
    recorded = getattr(preset, "recorded_run", None)
    if recorded is not None:
        return RunCost(
            recorded.startup_s,
            recorded.agent_s_per_task,
            recorded.after_s,
            f"this model's recorded runs ({recorded.source})",
        )
    if not preset.gpu.cpu:
        return GPU_COST
    return CPU_FP32_COST if runs_float32(preset, cpuinfo) else CPU_COST


def warm_startup_s(preset: Any) -> float:
    """A start of a config that started before (vLLM's compile cache): the preset's record,
    else the first start's (nothing known says it is shorter)."""
    recorded = getattr(preset, "recorded_run", None)
    if recorded is not None and recorded.warm_startup_s is not None:
        return float(recorded.warm_startup_s)
    return float(preset_cost(preset).startup_s)


def run_estimate_s(preset: Any) -> float:
    """Seconds one trial of `preset` is expected to take: startup + tasks / agents + after."""
    cost = preset_cost(preset)
    w = preset.workload
    tasks = w.tasks + w.warmup_tasks
    return float(cost.startup_s + tasks * cost.agent_s_per_task / w.agents + cost.after_s)


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
    return float(calibration.startup_s + workload + after)


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
    if window_s is not None:
        return (
            cost.window_run_s(preset.workload, window_s),
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
        per_run = cost.window_run_s(w, window_s)
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
