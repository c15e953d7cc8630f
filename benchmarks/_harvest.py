"""Grid runs taken from studies already run on this machine (`record_grid.py --harvest URL`).

Every `tuner optimize` of the CPU preset runs the baseline first and, with confirmation, twice
more; some of its candidates are configs of the recorded grid too. Those trials went through
the same `evaluate()` with the same workload, so their stored measurements are grid runs as
good as the recorder's own, for no extra server time on a box where server time is scarce. A
trial is taken only when its study's preset equals the grid's (the search space aside), its
config is in the grid, it completed unpruned with every task recorded, and it is not taken yet.
Each harvested run names its source.
"""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.attrs import StudyAttr, TrialAttr
from tuner.storage import Store
from tuner.study.space import Preset, config_key
from tuner.study.trial.evaluate import TrialResult

__all__ = ["harvest"]


def _same_setup(stored: dict[str, Any], preset: Preset) -> bool:
    data = dict(stored)
    data["space"] = json.loads(preset.space.model_dump_json())
    try:
        return Preset.model_validate(data) == preset
    except ValueError:
        return False


def harvest(
    url: str, preset: Preset, keys: set[str], taken: set[str], entry: Any
) -> list[dict[str, Any]]:
    """Grid runs from every study at `url` (the database of a `tuner optimize`).

    Args:
        url: The study storage.
        preset: The grid's preset.
        keys: Config keys of the grid.
        taken: Sources already in the data file (`study/trial@url`), skipped.
        entry: `record_grid._run_entry`, which turns a result into a data-file run.
    """

    out: list[dict[str, Any]] = []
    store = Store(url)
    try:
        for summary in optuna.get_all_study_summaries(url):
            study = optuna.load_study(study_name=summary.study_name, storage=url)
            stored = study.user_attrs.get(StudyAttr.PRESET)
            if not isinstance(stored, dict) or not _same_setup(stored, preset):
                continue
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                source = f"{study.study_name}/{t.number}@{url}"
                key = config_key(dict(t.params))
                if key not in keys or source in taken or t.user_attrs.get(TrialAttr.INFEASIBLE):
                    continue
                runs = store.workload_runs(study.study_name, t.number, with_tasks=True)
                starts = store.server_starts(study.study_name, t.number)
                if not runs or not starts:
                    continue
                w = runs[-1].record
                scored = [r for r in w.task_records if not r.warmup]
                if len(scored) != preset.workload.tasks:
                    continue
                timing = t.user_attrs.get(TrialAttr.TIMING) or {}
                result = TrialResult(
                    trial_number=t.number,
                    spec=preset.server_spec(dict(t.params), model_path="harvested"),
                    server_starts=tuple(s.record for s in starts),
                    workload=w,
                    wall_s=float(timing.get("worker_wall_s", 0.0)),
                    startup_s=float(timing.get("startup_s", 0.0)),
                    workload_s=float(timing.get("workload_s", 0.0)),
                    throughput_s=float(timing.get("throughput_s", 0.0)),
                )
                zero = min(r.started_s for r in scored)
                ends = sorted((r.started_s + r.wall_s - zero, r.success) for r in scored)
                progress, wins = [], 0
                for done, (end, ok) in enumerate(ends, start=1):
                    wins += ok
                    progress.append([done, wins, round(end, 3)])
                run = entry(key, -1, result, progress)
                run["source"] = source
                run["recorded_at"] = (
                    t.datetime_complete.strftime("%Y-%m-%dT%H:%M:%SZ")
                    if t.datetime_complete
                    else None
                )
                out.append(run)
    finally:
        store.close()
    return out
