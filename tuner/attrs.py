"""The user attributes a tuner study writes, and the trial roles and control kinds among them.

optuna-dashboard shows user attributes, and `tuner report`/`export`/`explain` read them back, so
the names are one contract kept here, outside the study package that writes them. Measurements
also live, in full, in tuner's own tables. The Optuna parameter names are the search space's
(`tuner.study.space.Preset.suggest`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

__all__ = [
    "ControlKind",
    "Role",
    "StudyAttr",
    "TrialAttr",
    "feasible",
    "is_feasible",
    "is_infeasible",
    "marked_infeasible",
    "role_from",
]


class Role(StrEnum):
    """A trial's role (`TrialAttr.ROLE`); see `tuner.study.search.roles` for what each one
    guarantees."""

    BASELINE = "baseline"  # no speculation at the preset's baseline memory and max_num_seqs
    CANDIDATE = "candidate"  # a sampled config
    CONTROL = "control"  # `tuner explain`'s extra run for a candidate
    CONFIRM = "confirm"  # a re-run of a top config or the baseline (`tuner confirm`)
    # The baseline's config started again during the search, every `--baseline-every` sampled
    # trials: the study's own measure of its drift and noise (never counted, never sampled)
    BASELINE_RERUN = "baseline_rerun"


class ControlKind(StrEnum):
    """Which control a `Role.CONTROL` trial is (`TrialAttr.CONTROL_KIND`)."""

    KV_CUT = "kv_cut"  # the baseline with its KV cache cut to the candidate's
    NO_BLOCK_DROP = "no_block_drop"  # the candidate with the last cache block kept


class StudyAttr:
    """Study-level user attributes."""

    PRESET: Final = "preset"  # the full preset as a JSON-able dict
    MODEL: Final = "model"  # preset model name, e.g. "smollm2-135m"
    GPU: Final = "gpu"  # preset GPU name, e.g. "cpu"
    TUNER_VERSION: Final = "tuner_version"
    TARGET: Final = "n_trials_target"  # counted trials the current run works towards
    MODE: Final = "mode"  # workload mode: "replay" | "live" | "traces"
    MODE_NOTE: Final = "mode_note"  # what the mode's numbers mean, e.g. replay: answers not graded
    # tuner.study.stages.confirm's verdict per confirmed config
    CONFIRMATION: Final = "confirmation"
    # the vLLM the study measured (tuner.study.preflight.checks)
    VLLM_VERSION: Final = "vllm_version"
    VLLM_LACKS: Final = "vllm_lacks"  # knobs tuner can emit that this vLLM rejects
    # The run-to-run noise of a round's paired log ratio the verdicts used
    # (tuner.metrics.BetweenRunNoise.to_json()): stored so a verdict can be recomputed.
    BETWEEN_RUN_NOISE: Final = "between_run_noise"
    # A sequential confirmation's looks ({"first": rounds at the first look, "max": the cap}):
    # the export tests at the level of the look the study stopped at
    # (tuner.results.export_rule.look_level). Absent: one look at the end, as before.
    CONFIRM_PLAN: Final = "confirm_plan"
    # Where a sequential confirmation stopped: {"rounds": rounds run, "reason": in words}.
    CONFIRM_STOP: Final = "confirm_stop"
    # True while a confirmation stage is under way (tuner.study.stages.confirm.confirm_study
    # sets it as the stage begins, False once its verdicts are stored): a `tuner optimize`
    # stopped during the stage resumes it on its next run, adding no search trials first.
    CONFIRM_PENDING: Final = "confirm_pending"
    # tuner.study.preflight.sizing.workload_reductions: one line per knob cut for the
    # workload ([] none)
    SPACE_REDUCTIONS: Final = "space_reductions"
    # The workload's sizing (tuner.study.preflight.plan): the speeds measured on the study's
    # first server and the size every trial runs (tuner.workload.calibration.Calibration's
    # JSON), or {"calibrated": false, "why": ...} when the study keeps the preset's sizing.
    CALIBRATION: Final = "calibration"
    # Sampled trials between two re-runs of the baseline during the search (`--baseline-every`;
    # 0: none), as the search that ran them was set (tuner.study.search.roles.rerun_due)
    BASELINE_EVERY: Final = "baseline_every"


class TrialAttr:
    """Trial-level user attributes (all JSON-able)."""

    ROLE: Final = "role"  # a Role
    CONTROL_OF: Final = "control_of"  # trial number of the candidate a control explains
    CONTROL_KIND: Final = "control_kind"  # a ControlKind
    SPEC_OVERRIDES: Final = "spec_overrides"  # a control's changes to the params' ServerSpec
    SERVER_SPEC: Final = "server_spec"  # ServerSpec.model_dump(mode="json") actually launched
    SERVE_COMMAND: Final = "serve_command"  # `vllm serve MODEL ...` a user would paste
    MAX_NUM_SEQS_REQUESTED: Final = "max_num_seqs_requested"
    MAX_NUM_SEQS_CLAMPED: Final = "max_num_seqs_clamped"  # set only after a Mamba-block retry
    KV_CACHE_TOKENS: Final = "kv_cache_tokens"
    TASKS_PER_HOUR: Final = "tasks_per_hour"
    TASKS_PER_HOUR_LOW: Final = "tasks_per_hour_low"
    TASKS_PER_HOUR_HIGH: Final = "tasks_per_hour_high"
    SUCCESS_RATE: Final = "success_rate"
    CACHE_HIT_PCT: Final = "cache_hit_pct"
    ACCEPTANCE_RATE: Final = "acceptance_rate"
    MEAN_ACCEPTANCE_LENGTH: Final = "mean_acceptance_length"
    PREEMPTIONS: Final = "preemptions"
    ENERGY_PER_TASK_J: Final = "energy_per_task_j"  # absent when not measured
    GPU_MEMORY_MIB: Final = "gpu_memory_mib"  # NVML, at the end of the window; absent on CPU
    STARTUP_S: Final = "startup_s"
    # The start's parts in seconds, from the server's log (tuner.server.facts): {load_s,
    # compile_s, compile_cache ("hit" or "miss"), profile_s, graphs_s, engine_init_s}; only
    # the parts the log named.
    START_PARTS: Final = "start_parts"
    # Scored steps per reuse class (tuner.workload.reuse.COUNTED_REUSE_CLASSES): {class: n}
    REUSE: Final = "reuse"
    BLOCK_SIZE: Final = "block_size"  # the attention KV block in tokens the server used
    # vLLM's `mamba_cache_mode` on a hybrid (none / align / all), from the server's log
    MAMBA_CACHE_MODE: Final = "mamba_cache_mode"
    # True: served with `--load-format dummy` (random weights); acceptance is not measured
    DUMMY_WEIGHTS: Final = "dummy_weights"
    # tuner.study.space.GpuPart.emulation_record: the searched gpu_memory_utilization (of the
    # emulated card), the one launched on this card, and the arithmetic's inputs
    GPU_EMULATION: Final = "gpu_emulation"
    TIMING: Final = "timing"  # worker seconds: wall, startup, workload (warm-up too), throughput
    # tuner.server FailureKind value, "interrupted", "worker_crashed" or "duplicate"
    FAILURE_KIND: Final = "failure_kind"
    FAILURE_REASON: Final = "failure_reason"  # one line
    INFEASIBLE: Final = "infeasible"  # True when the config cannot run on this card
    PRUNED_AT_TASKS: Final = "pruned_at_tasks"
    # Screening (tuner.study.search.pruning.ScreenRule): rungs a candidate passed, and where it was
    # stopped ({"rung", "tasks", "optimistic_tasks_per_hour", "best_tasks_per_hour"}).
    RUNG: Final = "rung"
    SCREENED_OUT_AT: Final = "screened_out_at"
    REQUEUED_FROM: Final = "requeued_from"  # number of the interrupted trial this one repeats
    DUPLICATE_OF: Final = "duplicate_of"  # a queued run that repeated this trial (FAIL, no count)
    DRIVER: Final = "driver"  # {"host", "pid"} of the driver process running the trial
    RAY_NODE: Final = "ray_node"  # the Ray node id (hex) whose worker ran (or lost) the trial
    # Errors after the workload finished (plain benchmark, stop): the trial keeps its value.
    NOTES: Final = "notes"  # list of one-line strings
    # tuner.workload.correctness_probe.ProbeResult.to_json(): greedy probe answers
    PROBE: Final = "probe"
    CONFIRM_OF: Final = "confirm_of"  # a confirmation run: the trial number whose config it re-runs
    CONFIRM_ROUND: Final = "confirm_round"  # a confirmation run: its round (0, 1, ...)
    # A candidate that is the baseline's config entered again on purpose (`tuner optimize
    # --also-try baseline`, an A/A check): the baseline's trial number. Exempt from the
    # duplicate check; judged like any candidate.
    COPY_OF: Final = "copy_of"


def role_from(user_attrs: Mapping[str, Any], number: int) -> str:
    """A trial's role from its user attributes.

    Trials written before roles existed are the baseline (trial 0) or candidates. A role this
    version does not know is returned as written, so reports still show it.
    """
    role = user_attrs.get(TrialAttr.ROLE)
    if role is None:
        return str(Role.BASELINE if number == 0 else Role.CANDIDATE)
    return str(role)


# ---- feasibility: the one rule --------------------------------------------------------------
# A config is infeasible when it could not run on the card (the trial says so in the
# `infeasible` attribute and the `fits_on_card` constraint, `tuner.study.search.recording`), and
# a trial is feasible when it completed with a score and is not infeasible. The search, the
# stages after it and the results all decide through these functions.


def marked_infeasible(user_attrs: Mapping[str, Any], constraints: Iterable[float]) -> bool:
    """The config could not run on the card: the `infeasible` attribute or a violated
    constraint (either one: a study written by an older tuner may hold only one of them)."""
    return bool(user_attrs.get(TrialAttr.INFEASIBLE)) or any(v > 0 for v in constraints)


def feasible(*, complete: bool, value: float | None, infeasible: bool) -> bool:
    """Completed with a score, and the config could run on the card."""
    return complete and value is not None and not infeasible


def is_infeasible(trial: FrozenTrial) -> bool:
    """`marked_infeasible` for an Optuna trial."""
    return marked_infeasible(trial.user_attrs, trial.constraints.values())


def is_feasible(trial: FrozenTrial) -> bool:
    """`feasible` for an Optuna trial (its state named, so this module needs no Optuna)."""
    return feasible(
        complete=trial.state.name == "COMPLETE",
        value=trial.value,
        infeasible=is_infeasible(trial),
    )
