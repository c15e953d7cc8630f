"""Read a finished (or running) study back: Optuna trials joined with tuner's tables.

`load_results` gives one frozen `TrialRow` per trial. Measurements come from tuner's own tables
where they exist (they hold every task and step) and fall back to the trial's user attributes
(`tuner.attrs.TrialAttr`), so a study whose tables were lost still reports what Optuna kept.
Every measurement is `None` when it was not measured; nothing is guessed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import ControlKind, Role, StudyAttr, TrialAttr, feasible, is_infeasible, role_from
from tuner.errors import StudyError
from tuner.metrics import DEFAULT_NOISE, BetweenRunNoise, RunOutcomes
from tuner.records import ServerStartRecord, ThroughputRecord, WorkloadRecord
from tuner.results.configs import MODE_NOTES, ReuseCounts, describe_config
from tuner.results.load_sweep import LoadSweep, sweep_from_attrs
from tuner.storage import Store, masked, normalize_url, open_engine
from tuner.workload.correctness_probe import ProbeResult
from tuner.workload.reuse import COUNTED_REUSE_CLASSES, reuse_phrase

__all__ = [
    "MODE_NOTES",
    "ReuseCounts",
    "StudyResults",
    "TrialRow",
    "describe_config",
    "load_results",
    "open_optuna_storage",
    "resolve_study_name",
    "study_noise",
]


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


# Failure kinds that say nothing about the config (tuner.study.search.roles.NOT_MEASURED_KINDS): the
# run is re-queued and runs again.
_NOT_THE_CONFIGS_DOING = frozenset({"interrupted", "duplicate", "worker_crashed"})


def open_optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage on a tuner URL; an unusable URL fails in one line (StorageError)."""
    open_engine(url).dispose()  # connects once: a bad URL or a down server fails here, clearly
    return optuna.storages.RDBStorage(normalize_url(url))


def resolve_study_name(storage: optuna.storages.BaseStorage, study: str | None, url: str) -> str:
    """`study` if it exists; with none given, the only study in the storage.

    Raises:
        StudyError: the study does not exist, the storage is empty, or it holds several
            studies and none was named (the line lists their names).
    """
    names = sorted(s.study_name for s in storage.get_all_studies())
    if study is not None:
        if study not in names:
            known = ", ".join(names) or "none"
            raise StudyError(f"no study named {study!r} in {masked(url)} (studies: {known})")
        return study
    if not names:
        raise StudyError(f"{masked(url)} holds no study yet; run `tuner optimize` first")
    if len(names) > 1:
        raise StudyError(
            f"{masked(url)} holds {len(names)} studies; choose one with --study: "
            + ", ".join(names)
        )
    return names[0]


def load_results(url: str, study: str | None = None) -> StudyResults:
    """Read study `study` (or the only one) from `url` into frozen rows.

    Raises:
        StorageError: the URL cannot be opened.
        StudyError: no such study, or the study cannot be chosen (see `resolve_study_name`).
    """
    storage = open_optuna_storage(url)
    try:
        name = resolve_study_name(storage, study, url)
        loaded = optuna.load_study(study_name=name, storage=storage)
        trials = loaded.get_trials(deepcopy=False)
        study_attrs = loaded.user_attrs
    finally:
        with contextlib.suppress(Exception):  # disposing a pool must not hide the real error
            storage.remove_session()
            storage.engine.dispose()
    store = Store(url)
    try:
        rows = tuple(_row(t, _TrialTables.read(store, name, t.number)) for t in trials)
    finally:
        store.close()
    return StudyResults(
        study_name=name,
        storage=masked(url),
        model=_opt_str(study_attrs.get(StudyAttr.MODEL)),
        gpu=_opt_str(study_attrs.get(StudyAttr.GPU)),
        trials=tuple(sorted(rows, key=lambda r: r.number)),
        mode=_mode(study_attrs, rows),
        sweep=sweep_from_attrs(study_attrs),
        noise=study_noise(study_attrs),
        confirm_looks=_looks(study_attrs.get(StudyAttr.CONFIRM_PLAN)),
        confirm_stop=_stop(study_attrs.get(StudyAttr.CONFIRM_STOP)),
        baseline_every=_opt_int(study_attrs.get(StudyAttr.BASELINE_EVERY)),
    )


def _stop(value: object) -> tuple[int, str] | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("rounds"), int):
        return None
    return (int(value["rounds"]), str(value.get("reason") or ""))


def _looks(value: object) -> tuple[int, int] | None:
    if not isinstance(value, Mapping):
        return None
    first, cap = value.get("first"), value.get("max")
    if isinstance(first, int) and isinstance(cap, int) and 1 <= first <= cap:
        return (first, cap)
    return None


def study_noise(study_attrs: Mapping[str, Any]) -> BetweenRunNoise:
    """The between-run noise a study's verdicts use: stored on the study, else its preset's
    `between_run`, else `tuner.metrics.DEFAULT_NOISE`."""
    stored = BetweenRunNoise.from_json(study_attrs.get(StudyAttr.BETWEEN_RUN_NOISE))
    if stored is not None:
        return stored
    preset = study_attrs.get(StudyAttr.PRESET)
    if isinstance(preset, Mapping):
        part = preset.get("between_run")
        if isinstance(part, Mapping):
            given = BetweenRunNoise.from_json({**part, "source": "the preset's between_run"})
            if given is not None:
                return given
    return DEFAULT_NOISE


def _mode(study_attrs: Mapping[str, Any], rows: Sequence[TrialRow]) -> str | None:
    if isinstance(study_attrs.get(StudyAttr.MODE), str):
        return str(study_attrs[StudyAttr.MODE])
    preset = study_attrs.get(StudyAttr.PRESET)
    workload = preset.get("workload") if isinstance(preset, Mapping) else None
    if isinstance(workload, Mapping):
        return "traces" if workload.get("traces") else _opt_str(workload.get("mode"))
    return next((r.mode for r in rows if r.mode), None)


@dataclass(frozen=True)
class _TrialTables:
    starts: Sequence[ServerStartRecord]
    workload: WorkloadRecord | None
    throughput: Sequence[ThroughputRecord]

    @classmethod
    def read(cls, store: Store, study: str, number: int) -> _TrialTables:
        runs = store.workload_runs(study, number, with_tasks=True)
        return cls(
            starts=[s.record for s in store.server_starts(study, number)],
            workload=runs[-1].record if runs else None,  # a re-run replaces, the last one counts
            throughput=[t.record for t in store.throughput_runs(study, number)],
        )


_STATES = {
    TrialState.COMPLETE: "complete",
    TrialState.PRUNED: "pruned",
    TrialState.FAIL: "fail",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "waiting",
}


def _row(trial: FrozenTrial, tables: _TrialTables) -> TrialRow:
    ua = trial.user_attrs
    screened = ua.get(TrialAttr.SCREENED_OUT_AT)
    w = tables.workload
    infeasible = is_infeasible(trial)
    started = [s for s in tables.starts if s.facts.kv_cache_tokens is not None]
    facts = started[-1].facts if started else None
    tph: float | None
    low: float | None
    high: float | None
    if w is not None:
        tph, low, high = w.tasks_per_hour, w.tasks_per_hour_low, w.tasks_per_hour_high
    else:
        tph = _opt_float(ua.get(TrialAttr.TASKS_PER_HOUR))
        low = _opt_float(ua.get(TrialAttr.TASKS_PER_HOUR_LOW))
        high = _opt_float(ua.get(TrialAttr.TASKS_PER_HOUR_HIGH))
    if tph is None and trial.state == TrialState.COMPLETE and not infeasible:
        tph = trial.value
    spec = ua.get(TrialAttr.SERVER_SPEC)
    return TrialRow(
        number=trial.number,
        state=_STATES.get(trial.state, trial.state.name.lower()),
        role=role_from(ua, trial.number),
        params=dict(trial.params),
        value=trial.value,
        control_of=_opt_int(ua.get(TrialAttr.CONTROL_OF)),
        control_kind=_opt_str(ua.get(TrialAttr.CONTROL_KIND)),
        infeasible=infeasible,
        failure_kind=_opt_str(ua.get(TrialAttr.FAILURE_KIND)),
        failure_reason=_opt_str(ua.get(TrialAttr.FAILURE_REASON)),
        pruned_at_tasks=_opt_int(ua.get(TrialAttr.PRUNED_AT_TASKS)),
        rung=_opt_int(ua.get(TrialAttr.RUNG)),
        screened_out_rung=_opt_int(screened.get("rung")) if isinstance(screened, Mapping) else None,
        serve_command=_opt_str(ua.get(TrialAttr.SERVE_COMMAND)),
        server_spec=dict(spec) if isinstance(spec, Mapping) else None,
        vllm_version=facts.vllm_version if facts else None,
        kv_cache_tokens=(
            facts.kv_cache_tokens if facts else _opt_int(ua.get(TrialAttr.KV_CACHE_TOKENS))
        ),
        tasks=w.tasks if w else None,
        successes=w.successes if w else None,
        tasks_per_hour=tph,
        tasks_per_hour_low=low,
        tasks_per_hour_high=high,
        cache_hit_pct=_cache_hit_pct(w, ua),
        reuse=_reuse(w),
        block_size=(facts.block_size if facts and facts.block_size else None)
        or _opt_int(ua.get(TrialAttr.BLOCK_SIZE)),
        mamba_cache_mode=_opt_str(ua.get(TrialAttr.MAMBA_CACHE_MODE)),
        dummy_weights=bool(ua.get(TrialAttr.DUMMY_WEIGHTS))
        or (isinstance(spec, Mapping) and spec.get("load_format") == "dummy"),
        preemptions=(
            w.preemptions
            if w is not None and w.preemptions is not None
            else _opt_int(ua.get(TrialAttr.PREEMPTIONS))
        ),
        energy_per_success_j=_energy_per_success(w, ua),
        tokens_per_s={t.streams: t.output_tokens_per_s for t in tables.throughput},
        spec_drafts=w.spec_drafts if w else None,
        accepted_per_pos=w.spec_accepted_per_pos if w else None,
        acceptance_rate=(
            w.acceptance_rate
            if w is not None and w.acceptance_rate is not None
            else _opt_float(ua.get(TrialAttr.ACCEPTANCE_RATE))
        ),
        completed_at=trial.datetime_complete,
        started_at=trial.datetime_start,
        confirm_of=_opt_int(ua.get(TrialAttr.CONFIRM_OF)),
        confirm_round=_opt_int(ua.get(TrialAttr.CONFIRM_ROUND)),
        probe=ProbeResult.from_json(ua.get(TrialAttr.PROBE)),
        outcomes=(
            RunOutcomes.of(w.task_records, w.scored_wall_s, w.agents)
            if w and w.task_records
            else None
        ),
        success_rate=w.success_rate if w else _opt_float(ua.get(TrialAttr.SUCCESS_RATE)),
        mode=w.mode if w else None,
        launched=_launched(tables.starts),
        copy_of=_opt_int(ua.get(TrialAttr.COPY_OF)),
    )


def _launched(starts: Sequence[ServerStartRecord]) -> tuple[str, ...] | None:
    ran = [s for s in starts if s.failure_kind is None and s.argv]
    if not ran:
        return None
    env = tuple(f"{k}={v}" for k, v in sorted(ran[-1].env.items()))
    return (*env, *ran[-1].argv)


def _cache_hit_pct(w: WorkloadRecord | None, ua: Mapping[str, Any]) -> float | None:
    # vLLM's prefix-cache counters (hits / queries, in tokens) are the published
    # "prompt tokens from the cache"; per-step cached_tokens are the fallback.
    if w is not None and w.prefix_cache_hit_ratio is not None:
        return 100.0 * w.prefix_cache_hit_ratio
    if w is not None:
        steps = [s for t in w.task_records if not t.warmup for s in t.steps]
        prompt = sum(s.prompt_tokens for s in steps)
        if steps and prompt and all(s.cached_tokens is not None for s in steps):
            return 100.0 * sum(s.cached_tokens or 0 for s in steps) / prompt
    return _opt_float(ua.get(TrialAttr.CACHE_HIT_PCT))


def _reuse(w: WorkloadRecord | None) -> ReuseCounts | None:
    if w is None or not w.task_records:
        return None
    counts = dict.fromkeys(COUNTED_REUSE_CLASSES, 0)
    for task in w.task_records:
        if task.warmup:
            continue
        for step in task.steps:
            if step.reuse_class in counts:
                counts[step.reuse_class] += 1
    reuse = ReuseCounts(**counts)
    return reuse if reuse.total else None


def _energy_per_success(w: WorkloadRecord | None, ua: Mapping[str, Any]) -> float | None:
    if w is not None and w.energy_joules is not None and w.successes:
        return w.energy_joules / w.successes
    return _opt_float(ua.get(TrialAttr.ENERGY_PER_TASK_J))


def _opt_float(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _opt_int(v: object) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _opt_str(v: object) -> str | None:
    return str(v) if v is not None else None
