"""The confirmation stage's records on the study: the between-run noise its verdicts use, the
configs the correctness probe flagged, and the verdicts (with the workload mode) that
optuna-dashboard shows.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import optuna

from tuner.attrs import StudyAttr

if TYPE_CHECKING:
    from tuner.metrics import BetweenRunNoise
    from tuner.study.space import Preset


__all__ = [
    "flagged_configs",
    "record_verdicts",
    "store_noise",
]


def record_verdicts(study: optuna.Study, storage_url: str) -> dict[str, dict[str, Any]]:
    """Judge the study's configs and write verdicts, mode and its meaning as study attributes."""
    from tuner.results.decision import judge_study
    from tuner.results.study_reader import load_results

    results = load_results(storage_url, study.study_name)
    verdicts: dict[str, dict[str, Any]] = {}
    for number, v in judge_study(results).items():
        verdicts[str(number)] = {
            "config": v.trial.label,
            "search_tasks_per_hour": _round(v.search_tph),
            "confirmed_tasks_per_hour": _round(v.confirmed_tph),
            "confirmation_runs": v.confirmed_runs,
            "paired_vs_baseline": v.paired.describe() if v.paired else None,
            "beats_baseline": v.beats_baseline,
            "correctness": v.correctness(),
            "changes_outputs": v.changes_outputs,
            "failed_confirmation_starts": list(v.failed_runs),
            "missing_baseline_rounds": list(v.missing_base_rounds),
        }
    study.set_user_attr(StudyAttr.CONFIRMATION, json.loads(json.dumps(verdicts)))
    if results.mode:
        study.set_user_attr(StudyAttr.MODE, results.mode)
        study.set_user_attr(StudyAttr.MODE_NOTE, results.mode_note)
    return verdicts


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def store_noise(study: optuna.Study, preset: Preset) -> BetweenRunNoise:
    """The between-run noise the study's verdicts use, stored on the study once: the preset's
    `between_run`, else `tuner.metrics.DEFAULT_NOISE`. A stored value is kept (the verdicts
    of a study do not move when a later tuner changes its default)."""
    from tuner.metrics import DEFAULT_NOISE, BetweenRunNoise

    stored = BetweenRunNoise.from_json(study.user_attrs.get(StudyAttr.BETWEEN_RUN_NOISE))
    if stored is not None:
        return stored
    noise = DEFAULT_NOISE
    if preset.between_run is not None:
        noise = BetweenRunNoise(
            preset.between_run.log_sd, preset.between_run.df, "the preset's between_run"
        )
    study.set_user_attr(StudyAttr.BETWEEN_RUN_NOISE, noise.to_json())
    return noise


def flagged_configs(storage_url: str, study_name: str) -> set[int]:
    """Trial numbers whose outputs the correctness check flagged (against the floor)."""
    from tuner.results.decision import judge_study
    from tuner.results.study_reader import load_results

    verdicts = judge_study(load_results(storage_url, study_name))
    return {n for n, v in verdicts.items() if v.changes_outputs}
