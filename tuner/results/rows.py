"""A study as a user reads it: one frozen `TrialRow` per trial and the `StudyResults` that hold
them with the study's own attributes.

Every measurement is `None` when it was not measured; nothing is guessed. The rows say what a
trial is (its label, role, feasibility) and what it measured; `tuner.results.study_reader`
fills them from Optuna's trials and tuner's tables, and the report, the plots, the export and
the verdicts read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tuner.attrs import ControlKind, Role, feasible
from tuner.metrics import DEFAULT_NOISE, BetweenRunNoise, RunOutcomes
from tuner.results.configs import MODE_NOTES, ReuseCounts, describe_config
from tuner.results.load_sweep import LoadSweep
from tuner.workload.correctness_probe import ProbeResult
from tuner.workload.reuse import reuse_phrase

__all__ = ["StudyResults", "TrialRow"]


@dataclass(frozen=True)
class TrialRow:
    """One trial as a user reads it: its config, its state and what it measured."""

    number: int
    state: str  # "complete" | "pruned" | "fail" | "running" | "waiting"
    role: str  # a tuner.attrs.Role (as written: an unknown one is kept)
    params: Mapping[str, Any] = field(default_factory=dict)
    value: float | None = None
    control_of: int | None = None
    control_kind: str | None = None
    infeasible: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    pruned_at_tasks: int | None = None
    # Screening (tuner.study.search.pruning.ScreenRule): the last rung passed, and the rung a
    # screened-out trial stopped at (None: not screened there).
    rung: int | None = None
    screened_out_rung: int | None = None
    serve_command: str | None = None
    server_spec: Mapping[str, Any] | None = None
    vllm_version: str | None = None
    kv_cache_tokens: int | None = None
    tasks: int | None = None
    successes: int | None = None
    tasks_per_hour: float | None = None
    tasks_per_hour_low: float | None = None
    tasks_per_hour_high: float | None = None
    cache_hit_pct: float | None = None
    reuse: ReuseCounts | None = None
    preemptions: int | None = None
    energy_per_success_j: float | None = None
    tokens_per_s: Mapping[int, float] = field(default_factory=dict)  # streams -> output tok/s
    spec_drafts: int | None = None
    accepted_per_pos: tuple[int, ...] | None = None
    acceptance_rate: float | None = None
    completed_at: datetime | None = None
    started_at: datetime | None = None  # when its server was asked for (the run order)
    confirm_of: int | None = None  # a confirmation run: the trial whose config it re-ran
    confirm_round: int | None = None
    probe: ProbeResult | None = None  # greedy answers to the correctness probe
    outcomes: RunOutcomes | None = None  # per-task outcomes of the scored run, for pairing
    success_rate: float | None = None
    mode: str | None = None  # the workload record's mode
    launched: tuple[str, ...] | None = None  # env (NAME=value) + argv of the server that ran
    copy_of: int | None = None  # an A/A copy of the baseline (`--also-try baseline`)
    block_size: int | None = None  # the attention KV block (tokens) the reuse classes used
    mamba_cache_mode: str | None = None  # a hybrid's vLLM mamba_cache_mode (none/align/all)
    dummy_weights: bool = False  # served with random weights: acceptance means nothing

    def reuse_line(self) -> str:
        """ "reuse all/short/none 0/133/11 of 144 scored steps (block 416, mamba cache align),
        102 preemptions"; "" when neither was measured."""
        counts = (
            {
                "all": self.reuse.all,
                "one_block_short": self.reuse.one_block_short,
                "partial": self.reuse.partial,
                "none": self.reuse.none,
            }
            if self.reuse is not None
            else None
        )
        text = reuse_phrase(counts, None, self.preemptions)
        if not text or self.reuse is None:
            return text
        where = ", ".join(
            x
            for x in (
                f"block {self.block_size}" if self.block_size else "",
                f"mamba cache {self.mamba_cache_mode}" if self.mamba_cache_mode else "",
            )
            if x
        )
        steps = f" of {self.reuse.total} scored steps" + (f" ({where})" if where else "")
        head, _, tail = text.partition(", ")
        return head + steps + (f", {tail}" if tail else "")

    @property
    def method(self) -> str:
        """Speculative method ("none" for no speculation)."""
        return str(self.params.get("method", "none"))

    @property
    def feasible(self) -> bool:
        """Completed with a score, and the config could run on the card."""
        return feasible(
            complete=self.state == "complete", value=self.value, infeasible=self.infeasible
        )

    @property
    def exportable(self) -> bool:
        """A feasible search trial a user may deploy (controls and confirmation runs measure)."""
        return self.feasible and self.role in (Role.BASELINE, Role.CANDIDATE)

    @property
    def label(self) -> str:
        """What the config is, in words (controls say which trial they explain)."""
        if self.role == Role.CONTROL:
            what = {
                str(ControlKind.KV_CUT): "no speculation cut to its KV cache",
                str(ControlKind.NO_BLOCK_DROP): "last cache block kept",
            }.get(self.control_kind or "", self.control_kind or "control")
            return f"control for #{self.control_of}: {what}"
        if self.role == Role.CONFIRM:
            return f"confirmation of #{self.confirm_of}, round {self.confirm_round}"
        if self.role == Role.BASELINE_RERUN:
            return "the baseline again (drift check during the search)"
        if self.copy_of is not None:
            return f"{describe_config(self.params)} (copy of #{self.copy_of}: A/A check)"
        return describe_config(self.params)

    @property
    def acceptance_by_position(self) -> tuple[float, ...] | None:
        """Share of drafts whose token at each position was accepted (vLLM's per-position)."""
        if not self.accepted_per_pos or not self.spec_drafts:
            return None
        return tuple(n / self.spec_drafts for n in self.accepted_per_pos)


# Failure kinds that say nothing about the config (tuner.study.search.roles.NOT_MEASURED_KINDS): the
# run is re-queued and runs again.
_NOT_THE_CONFIGS_DOING = frozenset({"interrupted", "duplicate", "worker_crashed"})


@dataclass(frozen=True)
class StudyResults:
    """A study's trials, ordered by number, with the study's own attributes."""

    study_name: str
    storage: str  # masked URL, safe to print
    model: str | None
    gpu: str | None
    trials: tuple[TrialRow, ...]
    mode: str | None = None  # "replay" | "live" | "traces"; None: not recorded
    sweep: LoadSweep | None = None  # `tuner sweep`'s stored load sweep, if it ran
    # The run-to-run noise of a round's paired log ratio: the study's stored value, else the
    # preset's, else the default measured on the CPU build (tuner.metrics.DEFAULT_NOISE).
    noise: BetweenRunNoise = DEFAULT_NOISE
    # A sequential confirmation's (rounds at the first look, the cap); None: one look.
    confirm_looks: tuple[int, int] | None = None
    # Where it stopped: (rounds run, why); None: not sequential, or not stopped yet.
    confirm_stop: tuple[int, str] | None = None
    # The search's interval between re-runs of the baseline (`--baseline-every`); None: not
    # recorded (a study from before re-runs existed), 0: off.
    baseline_every: int | None = None

    @property
    def dummy_weights(self) -> bool:
        """Some measured trial ran on random weights (`--load-format dummy`)."""
        return any(t.dummy_weights for t in self.trials)

    @property
    def mode_note(self) -> str | None:
        """What the scores mean in this mode (replay: load shape, answers not graded)."""
        return MODE_NOTES.get(self.mode or "")

    @property
    def graded(self) -> bool:
        """True when answers were graded (live); replay and traces only complete tasks."""
        return self.mode == "live"

    def confirm_runs(self, number: int) -> list[TrialRow]:
        """Finished confirmation runs of trial `number`'s config, by round."""
        runs = [t for t in self.trials if t.role == Role.CONFIRM and t.confirm_of == number]
        return sorted((t for t in runs if t.feasible), key=lambda t: t.confirm_round or 0)

    def confirm_failures(self, number: int) -> list[TrialRow]:
        """Confirmation runs of trial `number`'s config that did not give a score: a start
        that failed or a config that could not serve. Interrupted runs are not among them
        (they are re-queued and run again)."""
        runs = [t for t in self.trials if t.role == Role.CONFIRM and t.confirm_of == number]
        return sorted(
            (
                t
                for t in runs
                if (t.state == "fail" or t.infeasible)
                and t.failure_kind not in _NOT_THE_CONFIGS_DOING
            ),
            key=lambda t: t.confirm_round or 0,
        )

    def baseline_reruns(self) -> list[TrialRow]:
        """The baseline's feasible re-runs during the search (`Role.BASELINE_RERUN`)."""
        return [t for t in self.trials if t.role == Role.BASELINE_RERUN and t.feasible]

    def run_order(self) -> dict[int, int]:
        """Each started trial's place (0, 1, ...) in the study's order of server starts: by
        the time it was started, then by number (what the drift is interpolated over)."""
        started = sorted(
            (t for t in self.trials if t.started_at is not None),
            key=lambda t: (t.started_at, t.number),
        )
        return {t.number: i for i, t in enumerate(started)}

    @property
    def baseline(self) -> TrialRow | None:
        """The feasible baseline trial (the first, if the study ran it more than once)."""
        return next((t for t in self.trials if t.role == Role.BASELINE and t.feasible), None)

    def measured(self) -> list[TrialRow]:
        """Trials with a score: completed feasible ones and pruned ones, controls included.

        Confirmation runs and the baseline's re-runs during the search are left out: they
        are shown beside the trial they re-ran (re-runs: in the noise line).
        """
        return [
            t
            for t in self.trials
            if (t.feasible or t.state == "pruned")
            and t.tasks_per_hour is not None
            and t.role not in (Role.CONFIRM, Role.BASELINE_RERUN)
        ]

    def not_run(self) -> list[TrialRow]:
        """Trials that produced no score: infeasible or failed."""
        return [t for t in self.trials if t.infeasible or t.state == "fail"]
