"""Workload sizing: a GPU preset's scored window must be long enough to measure.

A GPU serves a small agent workload in seconds (the CPU preset's 12 tasks took 2.9 s on an H200,
docs/gpu-validation.md), and tasks/hour from a 3-second window is mostly noise. The rule, checked
at study start for GPU presets: at least `MIN_SCORED_S` seconds of scored time and at least
`min_tasks()` tasks, whichever needs more tasks.

Seconds are bounded from below without knowing the GPU: in a closed loop every agent waits for
its simulated tools after each tool call (lognormal with the preset's median, p99 = 12x the
median, docs/workload.md), so the window lasts at least the summed mean tool latency of the
scored tasks divided by the agents. The bound counts the tool calls of the real generated task
set (its oracle scripts), so it holds whatever the server's speed; decoding only adds to it.

CPU presets are exempt: the CPU build decodes a few dozen tokens/s, so decoding, not tools,
sets their window (an 8-12 task run lasts tens of seconds), and CI runs them many times.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import ConfigError
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import build_task_set

if TYPE_CHECKING:
    from tuner.study.space import Preset

__all__ = [
    "MIN_SCORED_S",
    "Reduction",
    "Sizing",
    "check_sizing",
    "in_flight",
    "kv_bytes_per_token",
    "mean_tool_latency_s",
    "min_tasks",
    "read_model_config",
    "size_workload",
    "workload_reductions",
]

MIN_SCORED_S = 60.0
# Four tasks per agent at least, and never fewer than 24: the bootstrap interval of tasks/h
# and the Wilson interval of the success rate need that many outcomes to be narrower than the
# differences the study looks for.
_MIN_TASKS = 24
_MIN_TASKS_PER_AGENT = 4
# The workload's tool latency: lognormal with p99 = 12x the median (tuner/workload/agent.py).
_LATENCY_SIGMA = math.log(12.0) / 2.3263478740408408


def mean_tool_latency_s(median_s: float) -> float:
    """Mean of the workload's lognormal tool latency with this median."""
    return median_s * math.exp(_LATENCY_SIGMA**2 / 2)


def min_tasks(agents: int, *, cpu: bool = False) -> int:
    """Fewest scored tasks for `agents` closed-loop agents.

    On a CPU preset (exempt from the window rule, see the module doc) the floor is four tasks
    per agent, at least 8: what calibration may scale a slow box's workload down to
    (`tuner.study.preflight.calibration`); the screening rungs at 1/4 and 1/2 then still see
    whole tasks of every agent.
    """
    if cpu:
        return max(8, _MIN_TASKS_PER_AGENT * agents)
    return max(_MIN_TASKS, _MIN_TASKS_PER_AGENT * agents)


@dataclass(frozen=True)
class Sizing:
    """What the scored window of a workload is at least."""

    tasks: int
    agents: int
    tool_calls: int
    floor_s: float  # summed mean tool latency / agents: the window lasts at least this long
    needed_tasks: int  # fewest tasks that meet both rules (>= tasks when it is met)

    @property
    def ok(self) -> bool:
        """Both rules hold."""
        return self.needed_tasks <= self.tasks

    def line(self) -> str:
        """One line for the user."""
        return (
            f"{self.tasks} scored tasks over {self.agents} agents wait at least "
            f"{self.floor_s:.0f} s for tools ({self.tool_calls} tool calls)"
        )


def _floor_s(settings: WorkloadSettings, calls: int) -> float:
    return calls * mean_tool_latency_s(settings.tool_latency_s) / settings.agents


def _calls_per_task(settings: WorkloadSettings, count: int) -> list[int]:
    # Task i depends on (seed, i) alone, so the first n of a longer set are the n-task set.
    bigger = settings.model_copy(update={"tasks": count})
    return [len(t.calls) for t in build_task_set(bigger)]


def size_workload(settings: WorkloadSettings) -> Sizing:
    """The scored window's lower bound for `settings`, and the fewest tasks both rules need."""
    calls = _calls_per_task(settings, settings.tasks)
    floor = _floor_s(settings, sum(calls))
    needed = max(settings.tasks, min_tasks(settings.agents))
    if floor < MIN_SCORED_S:
        if sum(calls) == 0 or settings.tool_latency_s <= 0:
            needed = max(needed, settings.tasks + 1)  # no task count can reach the floor
        else:
            # Tasks are alike on average: scale up (with room), then take the exact prefix.
            count = math.ceil(settings.tasks * MIN_SCORED_S / floor * 1.2) + 1
            while _floor_s(settings, sum(calls := _calls_per_task(settings, count))) < MIN_SCORED_S:
                count *= 2
            total = 0
            for n, c in enumerate(calls, start=1):
                total += c
                if _floor_s(settings, total) >= MIN_SCORED_S:
                    needed = max(needed, n)
                    break
    return Sizing(settings.tasks, settings.agents, sum(calls[: settings.tasks]), floor, needed)


def check_sizing(
    settings: WorkloadSettings, *, where: str, study_scored_s: float | None = None
) -> Sizing:
    """Refuse a GPU workload whose scored window is too short to measure.

    Args:
        settings: The workload the study would score every trial with.
        where: The preset it comes from, for the message.
        study_scored_s: The shortest scored window the study's own trials measured with this
            workload (runs of queued extras on a measured study: confirmation, controls). At
            `MIN_SCORED_S` or more it passes the workload whatever its task count: the extras
            repeat the study's sizing so that they compare with its trials.

    Raises:
        ConfigError: fewer tasks than `min_tasks`, or less than `MIN_SCORED_S` of tool waits
            (unless `settings.measured_scored_s` or `study_scored_s` says the window measured
            at least that).
    """
    if settings.traces is not None:
        # Recorded traces carry their own timing; the count is the only thing to check.
        if settings.tasks < min_tasks(settings.agents):
            raise ConfigError(
                f"{where}: {settings.tasks} scored traces is too few to measure; "
                f"use at least {min_tasks(settings.agents)} (--tasks)"
            )
        return Sizing(settings.tasks, settings.agents, 0, 0.0, settings.tasks)
    sizing = size_workload(settings)
    if sizing.ok:
        return sizing
    if study_scored_s is not None and study_scored_s >= MIN_SCORED_S:
        # The study measured its trials with this very workload: its extras must repeat it to
        # compare with them, and its windows were long enough.
        return sizing
    measured = settings.measured_scored_s
    if (
        measured is not None
        and measured >= MIN_SCORED_S
        and settings.tasks >= min_tasks(settings.agents)
    ):
        # A window bounded by prefills, not tools, that was measured long enough.
        return sizing
    separating = settings.separating_tasks
    if (
        measured is not None
        and separating is not None
        and separating >= 2 * settings.agents
        and settings.tasks >= separating
    ):
        # The preset measured its window and showed that this many tasks separate what it
        # measures beyond the between-run noise: the direct argument the two floors stand for.
        return sizing
    if settings.tool_latency_s <= 0:
        raise ConfigError(
            f"{where}: workload.tool_latency_s is 0, so nothing bounds the scored window on a "
            f"GPU (a few seconds); set a tool latency (0.25 s is realistic) and at least "
            f"{min_tasks(settings.agents)} tasks"
        )
    raise ConfigError(
        f"{where}: {sizing.line()}, under the {MIN_SCORED_S:.0f} s a GPU needs to measure "
        f"tasks/h; use at least {sizing.needed_tasks} tasks (--tasks {sizing.needed_tasks})"
    )


# ---- the space knows the workload ---------------------------------------------------------------
#
# Some knob values cannot change anything for the configured workload, so searching them only
# spends trials. `reduce_for_workload` drops them before the study starts, one stated line each:
#
# - max_num_seqs: a closed-loop agent has one request in flight at a time, so the server never
#   holds more than `agents` sequences (the load sweep's largest agent count, if the preset
#   sweeps); vLLM's max_num_seqs only caps the batch. Every choice at or above that schedules
#   the same batches; on a GPU a larger one only reserves more for CUDA graphs and activations.
# - KV cache bytes (CPU presets' kv_cache_memory_bytes): every agent's whole context is at most
#   agents x workload.shape.max_context_tokens tokens, at the bytes per token the model config
#   gives (2 x attention layers x KV heads x head dim x 2 bytes for bf16); a cache that holds
#   that holds every live sequence and the shared prefix, so a larger one changes nothing but
#   the memory it takes. Not applied to hybrid models (their cache also holds per-sequence
#   state the config does not size simply) nor to gpu_memory_utilization (the KV it leaves
#   depends on weights and activations measured at start).
#
# Kept: every value below the need (it can throttle, so it can change the result), the smallest
# value that covers the need, and the baseline's value (the baseline is trial 0 of the same
# space and Optuna refuses a queued value that is not among the choices). `--full-space` keeps
# the preset's space as written.


@dataclass(frozen=True)
class Reduction:
    """One knob's choices cut for the workload, and why."""

    knob: str
    before: tuple[int, ...]
    after: tuple[int, ...]
    evidence: str

    def line(self) -> str:
        """One line for the user (printed at study start, stored as a study attribute)."""
        return f"space: {self.knob} {list(self.before)} -> {list(self.after)}: {self.evidence}"


def kv_bytes_per_token(config: dict[str, Any], *, element_bytes: int = 2) -> int | None:
    """KV cache bytes per token from a Hugging Face model config (None: cannot tell).

    2 (K and V) x full-attention layers x KV heads x head dim x `element_bytes` (vLLM's KV
    cache follows the model's dtype: 2 for bf16/fp16, 4 for `--dtype float32`). A config with
    linear-attention layers (a hybrid) is None: its cache also holds per-sequence state.
    """
    text = config.get("text_config") or config
    layer_types = text.get("layer_types")
    if layer_types and any(t != "full_attention" for t in layer_types):
        return None
    layers = text.get("num_hidden_layers")
    heads = text.get("num_attention_heads")
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or (
        text["hidden_size"] // heads if heads and text.get("hidden_size") else None
    )
    if not (layers and kv_heads and head_dim):
        return None
    return 2 * int(layers) * int(kv_heads) * int(head_dim) * element_bytes


def read_model_config(model_path: str) -> dict[str, Any] | None:
    """The model's config.json when the model is a local directory (None otherwise)."""
    path = Path(model_path) / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def in_flight(preset: Preset) -> int:
    """The most requests the workload (and the preset's load sweep) ever has in flight."""
    return max(preset.workload.agents, *preset.load_sweep, 1)


def _keep(choices: tuple[int, ...], need: int, baseline: int | None) -> tuple[int, ...]:
    covering = sorted(c for c in choices if c >= need)
    keep = {c for c in choices if c < need}
    if covering:
        keep.add(covering[0])
    if baseline is not None:
        keep.add(baseline)
    return tuple(c for c in choices if c in keep)


def workload_reductions(
    preset: Preset, *, model_config: dict[str, Any] | None
) -> tuple[Preset, list[Reduction]]:
    """The preset with knob values that cannot matter for its workload dropped, and why.

    Args:
        preset: The preset to run (after `tuner.study.preflight.checks`).
        model_config: The model's config.json (`read_model_config`); None: KV not reduced.
    """
    space, base = preset.space, preset.baseline_params()
    updates: dict[str, Any] = {}
    out: list[Reduction] = []
    flight = in_flight(preset)
    seqs = _keep(space.max_num_seqs, flight, base.get("max_num_seqs"))
    if seqs != space.max_num_seqs:
        sweep = f" (load sweep up to {max(preset.load_sweep)})" if preset.load_sweep else ""
        out.append(
            Reduction(
                "max_num_seqs",
                space.max_num_seqs,
                seqs,
                f"{preset.workload.agents} closed-loop agents{sweep} never have more than "
                f"{flight} requests in flight, so every choice >= {flight} schedules the same "
                "batches; kept the smallest that covers it and the baseline's",
            )
        )
        updates["max_num_seqs"] = seqs
    per_token = (
        kv_bytes_per_token(model_config, element_bytes=preset.model.kv_element_bytes())
        if model_config is not None
        else None
    )
    kv = space.kv_cache_memory_bytes
    if kv is not None and per_token is not None and not preset.model.hybrid:
        tokens = preset.workload.agents * preset.workload.shape.max_context_tokens
        need = tokens * per_token
        kept = _keep(kv, need, base.get("kv_cache_memory_bytes"))
        if kept != kv:
            out.append(
                Reduction(
                    "kv_cache_memory_bytes",
                    kv,
                    kept,
                    f"{preset.workload.agents} agents x {preset.workload.shape.max_context_tokens}"
                    f" context tokens x {per_token} bytes/token (model config) = "
                    f"{need / 1e6:.0f} MB holds every agent's whole context; kept the smallest "
                    "choice that holds it and the baseline's",
                )
            )
            updates["kv_cache_memory_bytes"] = kept
    if not updates:
        return preset, out
    return preset.model_copy(update={"space": space.model_copy(update=updates)}), out
