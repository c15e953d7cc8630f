"""Read a finished (or running) study back: Optuna trials joined with tuner's tables.

`load_results` gives one frozen `TrialRow` per trial. Measurements come from tuner's own tables
where they exist (they hold every task and step) and fall back to the trial's user attributes
(`tuner.attrs.TrialAttr`), so a study whose tables were lost still reports what Optuna kept.
Every measurement is `None` when it was not measured; nothing is guessed.

The rows themselves (`TrialRow`, `StudyResults`) are in `tuner.results.rows`. `MODE_NOTES`,
`ReuseCounts` and `describe_config` (`tuner.results.configs`) are importable from here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import StudyAttr, TrialAttr, is_infeasible, role_from
from tuner.errors import StudyError
from tuner.metrics import DEFAULT_NOISE, BetweenRunNoise, RunOutcomes
from tuner.records import ServerStartRecord, ThroughputRecord, WorkloadRecord
from tuner.results.configs import MODE_NOTES, ReuseCounts, describe_config
from tuner.results.load_sweep import sweep_from_attrs
from tuner.results.rows import StudyResults, TrialRow
from tuner.storage import Store, masked, normalize_url, open_engine
from tuner.workload.correctness_probe import ProbeResult
from tuner.workload.reuse import COUNTED_REUSE_CLASSES

__all__ = [
    "MODE_NOTES",
    "ReuseCounts",
    "describe_config",
    "load_results",
    "open_optuna_storage",
    "resolve_study_name",
    "study_noise",
]


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
