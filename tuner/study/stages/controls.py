"""`tuner explain`: why a speculative config lost, split into memory and cache reuse.

The published study's controls, run automatically as extra trials of the same study (role
`Role.CONTROL`, never exported, not counted in the trial budget):

- **kv_cut**: the baseline (no speculation) with its KV cache cut to the candidate's size. The
  tasks/h it loses against the baseline is what the smaller KV cache alone explains. With a
  `num_gpu_blocks_override` the block count is computed from the tokens per block the
  baseline's own start reported (KV tokens / GPU blocks), so the cut holds the candidate's KV
  tokens to within `KV_MATCH` even where the two use different blocks (a hybrid's attention
  block is 400 tokens without MTP and 416 with it on the 27B shape); the table says how close
  it came.
- **no_block_drop**: for EAGLE/MTP-style drafters, the candidate with
  `disable_eagle_block_drop`, which keeps the last cache block that those drafters drop. A
  vLLM without that knob (0.26) cannot run it: explain says so, and the loss memory does not
  explain stays reuse and drafting together.

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
from tuner.records import StartupFacts
from tuner.results.attribution import Attribution, attribute
from tuner.server import EAGLE_STYLE
from tuner.storage import Store
from tuner.workload.reuse import count_reuse, three_way

# The KV-cut control should hold the candidate's KV tokens to within this fraction.
KV_MATCH = 0.02

__all__ = [
    "KV_MATCH",
    "ControlPlan",
    "ExplainRow",
    "Explanation",
    "choose_candidate",
    "cut_blocks",
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
    # One block short or more (one_block_short + partial): the published table's "short".
    reused_short: float | None = None
    reuse_steps: int | None = None  # scored steps counted (first steps of tasks left out)
    preemptions: int | None = None
    block_size: int | None = None


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


def cut_blocks(base: StartupFacts | None, candidate: StartupFacts | None) -> int | None:
    """GPU blocks that give the baseline the candidate's KV cache tokens.

    The tokens one block holds come from the baseline's own start (its KV tokens over its GPU
    blocks), not from the candidate's block count: on a hybrid the two use different attention
    blocks. On the H200 study of the 27B shape the baseline held 50,546 tokens in 145 blocks
    and MTP 34,105 in 102: MTP's count would have given the baseline 4.3% more tokens than
    MTP, the baseline's own tokens per block give 98 blocks, 0.2% more. None: a start did not
    report what the arithmetic needs.
    """
    if base is None or candidate is None:
        return None
    if not base.kv_cache_tokens or not base.num_gpu_blocks or not candidate.kv_cache_tokens:
        return None
    per_block = base.kv_cache_tokens / base.num_gpu_blocks
    return max(1, round(candidate.kv_cache_tokens / per_block))


def _last_facts(store: Store, study_name: str, number: int) -> StartupFacts | None:
    starts = store.server_starts(study_name, number)
    return starts[-1].record.facts if starts else None


def _reuse_fractions(
    store: Store, study_name: str, number: int
) -> tuple[tuple[float | None, ...], int]:
    """(all, one block short, short, none) shares of the scored steps, and how many steps."""
    runs = store.workload_runs(study_name, number, with_tasks=True)
    if not runs:
        return (None, None, None, None), 0
    counts = count_reuse(
        s.reuse_class
        for task in runs[-1].record.task_records
        if not task.warmup
        for s in task.steps
    )
    n = sum(counts.values())
    if not n:
        return (None, None, None, None), 0
    all_, short, none = three_way(counts)
    return (all_ / n, counts["one_block_short"] / n, short / n, none / n), n


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
        facts = _last_facts(store, study.study_name, t.number)
        (all_, one_short, short, none), steps = _reuse_fractions(store, study.study_name, t.number)
        out.append(
            ExplainRow(
                label=label,
                trial_number=t.number,
                tasks_per_hour=w.tasks_per_hour,
                tasks_per_hour_low=w.tasks_per_hour_low,
                tasks_per_hour_high=w.tasks_per_hour_high,
                kv_cache_tokens=facts.kv_cache_tokens if facts else None,
                reused_all=all_,
                reused_one_block_short=one_short,
                reused_nothing=none,
                reused_short=short,
                reuse_steps=steps or None,
                preemptions=w.preemptions,
                block_size=facts.block_size if facts else None,
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
    # The KV-cut control's KV tokens against the candidate's, minus 1 (None: not reported).
    kv_cut_mismatch: float | None = None
    notes: tuple[str, ...] = ()  # what could not be run or measured, one line each

    def sentence(self) -> str:
        """The one-line answer, with the block-drop control's effect when it was measured."""
        text = self.attribution.sentence()
        if self.block_kept is not None:
            gain = self.block_kept.tasks_per_hour - self.attribution.candidate
            text += f"; keeping the last cache block changes the candidate by {gain:+.0f} tasks/h"
        return text

    def split(self) -> str:
        """The loss in two parts: memory's, and what is left to reuse and drafting."""
        a = self.attribution
        if a.lost <= 0:
            return "no loss to split"
        memory = max(0.0, min(a.explained_by_memory, a.lost))
        rest = a.lost - memory
        return (
            f"of the {a.lost:,.0f} tasks/h lost, memory explains {memory:,.0f} "
            f"({memory / a.lost:.0%}) and {rest:,.0f} ({rest / a.lost:.0%}) is left to cache "
            "reuse and drafting"
        )


def _notes(study: optuna.Study, candidate: FrozenTrial, mismatch: float | None) -> tuple[str, ...]:
    notes = []
    if mismatch is None:
        notes.append("the KV-cut control's KV cache size was not reported: the cut is unchecked")
    elif abs(mismatch) > KV_MATCH:
        notes.append(
            f"the KV-cut control holds {mismatch:+.1%} KV tokens against the candidate's (more "
            f"than {KV_MATCH:.0%} off): memory's share is approximate"
        )
    lacks = study.user_attrs.get(StudyAttr.VLLM_LACKS) or []
    if candidate.params.get("method") in EAGLE_STYLE and "disable_eagle_block_drop" in lacks:
        version = study.user_attrs.get(StudyAttr.VLLM_VERSION) or "installed"
        notes.append(
            f"vLLM {version} has no disable_eagle_block_drop: the keep-last-block control "
            "cannot run here, so cache reuse and drafting are not told apart"
        )
    if candidate.user_attrs.get(TrialAttr.DUMMY_WEIGHTS):
        notes.append(
            "dummy weights: acceptance is not measured; this split is about memory and reuse, "
            "not about which method to deploy"
        )
    return tuple(notes)


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
        cand_facts = _last_facts(store, study.study_name, candidate.number)
        blocks = cut_blocks(
            _last_facts(store, study.study_name, _baseline(study).number), cand_facts
        )
        if blocks is None and cand_facts is not None:
            blocks = cand_facts.num_gpu_blocks  # the candidate's own count: close, not exact
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
        mismatch = (
            kv.kv_cache_tokens / table[1].kv_cache_tokens - 1
            if kv.kv_cache_tokens and table[1].kv_cache_tokens
            else None
        )
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
            kv_cut_mismatch=mismatch,
            notes=_notes(study, candidate, mismatch),
        )
    finally:
        store.close()
