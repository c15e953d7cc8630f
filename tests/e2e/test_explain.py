"""`tuner explain` on the real CPU study: controls run as trials, numbers from the database."""

from __future__ import annotations

import json
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from tests.e2e.conftest import CpuStudy, tuner_env
from tuner.attrs import TrialAttr
from tuner.storage import Store

# Out of CI's core (tests/conftest.py SLOW_SUITES): its control is one more real server run
# (about 4 min on a Zen 3); CI checks explain against the fake (test_explain_fake.py).
pytestmark = [pytest.mark.vllm, pytest.mark.extended]


def _explain(study: CpuStudy, trial: int, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tuner.cli", "explain", "--storage", study.storage_url,
            "--study", study.study_name, "--trial", str(trial), *extra]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, env=tuner_env(study.cache_dir), timeout=1800
    )


def test_explain_runs_a_kv_cut_control_and_reports_its_measurements(cpu_study: CpuStudy) -> None:
    study = optuna.load_study(study_name=cpu_study.study_name, storage=cpu_study.storage_url)
    baseline = study.trials[0]
    smaller = [
        t
        for t in study.trials
        if t.state == TrialState.COMPLETE
        and t.params["method"] == "ngram"
        and t.params["kv_cache_memory_bytes"] < baseline.params["kv_cache_memory_bytes"]
    ]
    assert smaller, "the seeded study has no ngram trial with a smaller KV cache"
    candidate = smaller[0]

    proc = _explain(cpu_study, candidate.number, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)

    study = optuna.load_study(study_name=cpu_study.study_name, storage=cpu_study.storage_url)
    controls = [t for t in study.trials if t.user_attrs.get(TrialAttr.ROLE) == "control"]
    # The seeded study measured no server with the candidate's KV size and no speculation
    # (tests/e2e/conftest.py), so the KV-cut row is a control trial run now, on the real build.
    (cut_row,) = [r for r in out["rows"] if r["trial_number"] not in (0, candidate.number)]
    cut = study.trials[cut_row["trial_number"]]
    assert cut.state == TrialState.COMPLETE
    assert cut.params["method"] == "none"
    assert cut.params["kv_cache_memory_bytes"] == candidate.params["kv_cache_memory_bytes"]
    assert out["controls_run"] == len(controls) == 1, [t.params for t in study.trials]
    (control,) = controls
    assert control.number == cut.number
    assert control.user_attrs[TrialAttr.CONTROL_OF] == candidate.number
    assert control.user_attrs[TrialAttr.CONTROL_KIND] == "kv_cut"

    store = Store(cpu_study.storage_url)
    try:

        def tph(number: int) -> float:
            (run,) = store.workload_runs(cpu_study.study_name, number)
            return run.record.tasks_per_hour

        def kv(number: int) -> int | None:
            return store.server_starts(cpu_study.study_name, number)[
                -1
            ].record.facts.kv_cache_tokens

        rows = {row["trial_number"]: row for row in out["rows"]}
        assert set(rows) == {baseline.number, candidate.number, cut.number}
        for number, row in rows.items():
            assert row["tasks_per_hour"] == pytest.approx(tph(number))
            assert row["kv_cache_tokens"] == kv(number)
        # The control has the candidate's KV cache, not the baseline's.
        assert rows[cut.number]["kv_cache_tokens"] == kv(candidate.number)
        assert kv(candidate.number) < kv(baseline.number)
        assert out["kv_cut_tasks_per_hour"] == pytest.approx(tph(cut.number))
        assert out["lost_tasks_per_hour"] == pytest.approx(
            tph(baseline.number) - tph(candidate.number)
        )
        assert out["explained_by_memory"] == pytest.approx(tph(baseline.number) - tph(cut.number))
    finally:
        store.close()

    # A second explain reuses the measured control instead of running it again.
    again = _explain(cpu_study, candidate.number)
    assert again.returncode == 0, again.stderr
    assert "KV cache cut" in again.stdout and "control trial(s) run" not in again.stdout
    study = optuna.load_study(study_name=cpu_study.study_name, storage=cpu_study.storage_url)
    again_controls = [t for t in study.trials if t.user_attrs.get(TrialAttr.ROLE) == "control"]
    assert len(again_controls) == len(controls)
