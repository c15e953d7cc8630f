"""`tuner explain`: why a speculative config lost, split into memory and cache reuse.

The published study's controls, run automatically as extra trials of the same study (role
`Role.CONTROL`, never exported, not counted in the trial budget):

- **kv_cut**: the baseline (no speculation) with its KV cache cut to the candidate's size. The
  tasks/h it loses against the baseline is what the smaller KV cache alone explains.
- **no_block_drop**: for EAGLE/MTP-style drafters, the candidate with
  `disable_eagle_block_drop`, which keeps the last cache block that those drafters drop.

Controls already measured (same candidate and kind, or a trial with exactly the control's
parameters) are reused instead of run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import ControlKind, Role, StudyAttr, TrialAttr, is_feasible
from tuner.errors import StudyError
from tuner.results.attribution import Attribution, attribute
from tuner.server import EAGLE_STYLE
from tuner.storage import Store

__all__ = [
    "ControlPlan",
    "ExplainRow",
    "Explanation",
    "choose_candidate",
    "enqueue_controls",
    "explain",
    "explain_rows",
    "plan_controls",
]


@dataclass(frozen=True)
class ControlPlan:
    """One control to run (or reuse) for a candidate."""

    kind: ControlKind
    params: dict[str, Any]
    overrides: dict[str, Any]
    reuse: int | None  # number of a finished trial that already measured it


@dataclass(frozen=True)
class ExplainRow:
    """One line of the "why" table."""

    label: str
    trial_number: int
    tasks_per_hour: float
    tasks_per_hour_low: float
    tasks_per_hour_high: float
    kv_cache_tokens: int | None
    reused_all: float | None
    reused_one_block_short: float | None
    reused_nothing: float | None


def _baseline(study: optuna.Study) -> FrozenTrial:
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(TrialAttr.ROLE) == Role.BASELINE and is_feasible(t):
            return t
    raise StudyError(
        f"study {study.study_name!r} has no finished baseline trial; run tuner optimize first"
    )


def choose_candidate(study: optuna.Study, number: int | None) -> FrozenTrial:
    """The given trial, or the best finished speculative candidate."""
    trials = study.get_trials(deepcopy=False)
    if number is not None:
        matches = [t for t in trials if t.number == number]
        if not matches:
            raise StudyError(f"study {study.study_name!r} has no trial {number}")
        trial = matches[0]
        if not is_feasible(trial) or trial.params.get("method", "none") == "none":
            raise StudyError(
                f"trial {number} is not a finished speculative trial; pick one whose method "
                "is not 'none' and whose state is COMPLETE"
            )
        return trial
    speculative = [
        t
        for t in trials
        if is_feasible(t)
        and t.params.get("method", "none") != "none"
        and t.user_attrs.get(TrialAttr.ROLE) == Role.CANDIDATE
    ]
    if not speculative:
        raise StudyError(f"study {study.study_name!r} has no finished speculative trial to explain")
    return max(speculative, key=lambda t: t.value or 0.0)


def _control_for(study: optuna.Study, candidate: int, kind: ControlKind) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False):
        if (
            t.user_attrs.get(TrialAttr.CONTROL_OF) == candidate
            and t.user_attrs.get(TrialAttr.CONTROL_KIND) == kind
            and t.state in (TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING)
        ):
            return t
    return None


def plan_controls(
    study: optuna.Study, candidate: FrozenTrial, kv_knob: str, num_gpu_blocks: int | None
) -> list[ControlPlan]:
    """The controls a candidate needs, each marked with a trial to reuse where one exists."""
    base = _baseline(study)
    plans = []
    params = dict(base.params)
    overrides: dict[str, Any] = {}
    if kv_knob == "kv_cache_memory_bytes":
        params["kv_cache_memory_bytes"] = candidate.params["kv_cache_memory_bytes"]
    elif num_gpu_blocks is not None:
        overrides["num_gpu_blocks_override"] = num_gpu_blocks
    else:
        raise StudyError(
            f"trial {candidate.number} has no recorded GPU block count to cut the baseline to"
        )
    plans.append(
        ControlPlan(
            ControlKind.KV_CUT,
            params,
            overrides,
            _reuse(study, candidate, ControlKind.KV_CUT, params, overrides),
        )
    )
    # A vLLM without the knob (0.26) would reject the control: never plan it there.
    lacks = study.user_attrs.get(StudyAttr.VLLM_LACKS) or []
    if (
        candidate.params["method"] in EAGLE_STYLE
        and not candidate.params.get("disable_eagle_block_drop")
        and "disable_eagle_block_drop" not in lacks
    ):
        keep = dict(candidate.params)
        over: dict[str, Any] = {"speculative": {"disable_eagle_block_drop": True}}
        if "disable_eagle_block_drop" in keep:
            keep["disable_eagle_block_drop"] = True
            over = {}
        plans.append(
            ControlPlan(
                ControlKind.NO_BLOCK_DROP,
                keep,
                over,
                _reuse(study, candidate, ControlKind.NO_BLOCK_DROP, keep, over),
            )
        )
    return plans


def _reuse(
    study: optuna.Study,
    candidate: FrozenTrial,
    kind: ControlKind,
    params: dict[str, Any],
    overrides: dict[str, Any],
) -> int | None:
    existing = _control_for(study, candidate.number, kind)
    if existing is not None and existing.state == TrialState.COMPLETE:
        return existing.number
    if not overrides:
        for t in study.get_trials(deepcopy=False):
            if (
                is_feasible(t)
                and t.params == params
                and not t.user_attrs.get(TrialAttr.SPEC_OVERRIDES)
            ):
                return t.number
    return None


def enqueue_controls(study: optuna.Study, candidate: FrozenTrial, plans: list[ControlPlan]) -> int:
    """Enqueue the controls that are neither measured nor already queued; returns how many."""
    queued = 0
    for plan in plans:
        if plan.reuse is not None or _control_for(study, candidate.number, plan.kind):
            continue
        attrs: dict[str, Any] = {
            TrialAttr.ROLE: Role.CONTROL,
            TrialAttr.CONTROL_OF: candidate.number,
            TrialAttr.CONTROL_KIND: plan.kind,
        }
        if plan.overrides:
            attrs[TrialAttr.SPEC_OVERRIDES] = plan.overrides
        study.enqueue_trial(plan.params, user_attrs=attrs, skip_if_exists=False)
        queued += 1
    return queued


def _reuse_fractions(store: Store, study_name: str, number: int) -> tuple[float | None, ...]:
    runs = store.workload_runs(study_name, number, with_tasks=True)
    if not runs:
        return (None, None, None)
    steps = [
        s.reuse_class
        for task in runs[-1].record.task_records
        if not task.warmup
        for s in task.steps
        if s.reuse_class != "first"
    ]
    if not steps:
        return (None, None, None)
    n = len(steps)
    return tuple(steps.count(c) / n for c in ("all", "one_block_short", "none"))


def explain_rows(
    study: optuna.Study, store: Store, rows: list[tuple[str, FrozenTrial]]
) -> list[ExplainRow]:
    """The "why" table from stored measurements (never from memory of the run)."""
    out = []
    for label, t in rows:
        runs = store.workload_runs(study.study_name, t.number)
        if not runs:
            raise StudyError(f"trial {t.number} has no stored workload run")
        w = runs[-1].record
        starts = store.server_starts(study.study_name, t.number)
        kv = starts[-1].record.facts.kv_cache_tokens if starts else None
        all_, short, none = _reuse_fractions(store, study.study_name, t.number)
        out.append(
            ExplainRow(
                label=label,
                trial_number=t.number,
                tasks_per_hour=w.tasks_per_hour,
                tasks_per_hour_low=w.tasks_per_hour_low,
                tasks_per_hour_high=w.tasks_per_hour_high,
                kv_cache_tokens=kv,
                reused_all=all_,
                reused_one_block_short=short,
                reused_nothing=none,
            )
        )
    return out


@dataclass(frozen=True)
class Explanation:
    """The answer of `tuner explain`: the table, the attribution and its sentence."""

    study_name: str
    candidate: int
    rows: tuple[ExplainRow, ...]
    attribution: Attribution
    controls_run: int
    block_kept: ExplainRow | None = None  # the no_block_drop control's row, when it ran

    def sentence(self) -> str:
        """The one-line answer, with the block-drop control's effect when it was measured."""
        text = self.attribution.sentence()
        if self.block_kept is not None:
            gain = self.block_kept.tasks_per_hour - self.attribution.candidate
            text += f"; keeping the last cache block changes the candidate by {gain:+.0f} tasks/h"
        return text


def explain(options: Any, trial_number: int | None = None) -> Explanation:
    """Run (or reuse) the controls for a candidate and build the "why" table.

    Args:
        options: `tuner.study.OptimizeOptions` naming the storage and study.
        trial_number: The speculative trial to explain; default the best one.
    """
    from tuner.storage import normalize_url
    from tuner.study.search.driver import run_waiting
    from tuner.study.space import Preset

    if not options.study_name:
        raise StudyError("give --study NAME (the study to explain)")
    store = Store(options.storage_url)
    try:
        try:
            study = optuna.load_study(
                study_name=options.study_name, storage=normalize_url(options.storage_url)
            )
        except KeyError:
            raise StudyError(f"no study named {options.study_name!r} in this storage") from None
        candidate = choose_candidate(study, trial_number)  # a bad --trial fails first
        stored = study.user_attrs.get(StudyAttr.PRESET)
        if stored is None:
            raise StudyError(
                f"study {options.study_name!r} has no stored preset (it was not written by "
                "`tuner optimize`), so its servers cannot be started again to explain it"
            )
        preset = Preset.model_validate(stored)
        knob = (
            "kv_cache_memory_bytes"
            if preset.space.kv_cache_memory_bytes is not None
            else "num_gpu_blocks_override"
        )
        starts = store.server_starts(study.study_name, candidate.number)
        blocks = starts[-1].record.facts.num_gpu_blocks if starts else None
        plans = plan_controls(study, candidate, knob, blocks)
        queued = enqueue_controls(study, candidate, plans)
        if queued or study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            run_waiting(preset, options)
        study = optuna.load_study(
            study_name=options.study_name, storage=normalize_url(options.storage_url)
        )
        by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
        base = _baseline(study)
        rows: list[tuple[str, FrozenTrial]] = [
            ("baseline (no speculation)", base),
            (f"candidate ({candidate.params['method']})", by_number[candidate.number]),
        ]
        labels = {
            ControlKind.KV_CUT: "baseline, KV cache cut to the candidate's",
            ControlKind.NO_BLOCK_DROP: "candidate, last block kept",
        }
        for plan in plans:
            measured = (
                by_number[plan.reuse]
                if plan.reuse is not None
                else _control_for(study, candidate.number, plan.kind)
            )
            if measured is None or not is_feasible(measured):
                raise StudyError(
                    f"the {plan.kind} control for trial {candidate.number} did not finish; "
                    "see tuner report and the server logs"
                )
            rows.append((labels[plan.kind], measured))
        table = explain_rows(study, store, rows)
        # The table's rows: baseline, candidate, then one per plan, in the plans' order.
        controls = {plan.kind: row for plan, row in zip(plans, table[2:], strict=True)}
        kv = controls[ControlKind.KV_CUT]
        return Explanation(
            study_name=study.study_name,
            candidate=candidate.number,
            rows=tuple(table),
            attribution=attribute(
                table[0].tasks_per_hour,
                table[1].tasks_per_hour,
                kv.tasks_per_hour,
                reuse_candidate=table[1].reused_all,
                reuse_reference=(
                    kv.reused_all if kv.reused_all is not None else table[0].reused_all
                ),
            ),
            controls_run=queued,
            block_kept=controls.get(ControlKind.NO_BLOCK_DROP),
        )
    finally:
        store.close()
