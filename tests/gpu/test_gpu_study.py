"""A whole `tuner optimize` study on a GPU, then export, report and explain on it.

The tiny hybrid MTP preset (`search_spaces/tiny-hybrid-mtp/h200.yaml`) with dummy weights:
Ray, Optuna and a SQLite file, at least 4 trials. Its baseline (max_num_seqs 512, a KV cache of
fewer blocks) meets vLLM's real "max_num_seqs (512) exceeds available Mamba cache blocks (N)"
and is relaunched with N. The tests then read what the study stored: startup facts parsed from
the GPU log, the clamp, MTP and n-gram trials, NVML energy per trial, the vLLM version, and that
no trial tried a knob the installed vLLM lacks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from tests.gpu.conftest import CliRun, run_tuner
from tests.gpu.coverage import TrialView, uncovered_methods
from tuner.attrs import StudyAttr, TrialAttr
from tuner.results import load_results
from tuner.storage import Store
from tuner.study.space import load_preset

STUDY = "tiny-hybrid-mtp-h200"
N_TRIALS = 4
# With this seed trials 1 and 2 are an MTP and an n-gram candidate (test_mtp_and_ngram...).
SEED = int(os.environ.get("TUNER_GPU_SEED", "5"))


@dataclass(frozen=True)
class GpuStudy:
    url: str
    out: Path
    optimize: CliRun
    env: dict[str, str]

    def trials(self) -> list[FrozenTrial]:
        study = optuna.load_study(study_name=STUDY, storage=self.url)
        return study.get_trials(deepcopy=False)

    def attrs(self) -> dict[str, object]:
        return optuna.load_study(study_name=STUDY, storage=self.url).user_attrs


@pytest.fixture(scope="session")
def study(gpu_out: Path, cache_dir: Path) -> GpuStudy:
    url = f"sqlite:///{gpu_out / 'study.db'}"
    env = {**os.environ, "TUNER_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}
    if os.environ.get("TUNER_GPU_REUSE") and (gpu_out / "study.db").is_file():
        # A study already run (and resumed) there by the same commands: read it as it is.
        texts = sorted(gpu_out.glob("optimize*.txt"))
        stderr = "".join(t.read_text() for t in texts)
        return GpuStudy(url, gpu_out, CliRun((), 0, "", stderr), env)
    proc = run_tuner(
        gpu_out,
        "optimize",
        "optimize",
        "--model",
        "tiny-hybrid-mtp",
        "--gpu",
        "h200",
        "--n-trials",
        str(N_TRIALS),
        "--seed",
        str(SEED),
        "--storage",
        url,
        # The confirmation stage re-runs the top configs: more device time than one lease has.
        "--confirm",
        "0",
        timeout_s=3600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return GpuStudy(url, gpu_out, proc, env)


def _finished(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.state == TrialState.COMPLETE]


def test_the_study_finished_its_trials(study: GpuStudy) -> None:
    finished = _finished(study.trials())
    assert len(finished) >= N_TRIALS
    assert finished[0].user_attrs[TrialAttr.ROLE] == "baseline"
    assert all((t.value or 0) > 0 for t in finished if not t.user_attrs.get(TrialAttr.INFEASIBLE))


def test_startup_facts_come_from_the_gpu_log(study: GpuStudy) -> None:
    store = Store(study.url)
    try:
        starts = [s.record for s in store.server_starts(STUDY) if s.record.failure_kind is None]
    finally:
        store.close()
    assert starts
    for record in starts:
        facts = record.facts
        assert facts.kv_cache_tokens and facts.kv_cache_tokens > 0
        assert facts.num_gpu_blocks and facts.num_gpu_blocks > 0
        assert facts.vllm_version == study.attrs()[StudyAttr.VLLM_VERSION]
        assert "CUDA_VISIBLE_DEVICES" in record.env


def test_the_mamba_block_failure_is_clamped_and_retried(study: GpuStudy) -> None:
    baseline = study.trials()[0]
    store = Store(study.url)
    try:
        starts = [s.record for s in store.server_starts(STUDY, baseline.number)]
    finally:
        store.close()
    assert [s.failure_kind for s in starts] == ["mamba_blocks_exceeded", None]
    available = int(starts[0].failure_details["available"])
    assert available < 512
    assert baseline.user_attrs[TrialAttr.MAX_NUM_SEQS_REQUESTED] == 512
    assert baseline.user_attrs[TrialAttr.MAX_NUM_SEQS_CLAMPED] == available
    relaunched = list(starts[1].argv)
    assert relaunched[relaunched.index("--max-num-seqs") + 1] == str(available)


def test_mtp_and_ngram_candidates_ran(study: GpuStudy) -> None:
    # Covered: served and drafted, or (MTP on a vLLM known to crash on hybrids, 0.26.0) recorded
    # infeasible with vLLM's root cause (tests/gpu/coverage.py).
    version = str(study.attrs()[StudyAttr.VLLM_VERSION])
    finished = _finished(study.trials())
    store = Store(study.url)
    try:
        views = []
        for t in finished:
            runs = store.workload_runs(STUDY, t.number)
            drafted = bool(runs) and (runs[-1].record.spec_drafts or 0) > 0
            views.append(TrialView.of(t.params, t.user_attrs, drafted))
    finally:
        store.close()
    not_served = {
        t.number: (t.params.get("method"), t.user_attrs.get(TrialAttr.FAILURE_REASON))
        for t in finished
        if t.user_attrs.get(TrialAttr.INFEASIBLE)
    }
    missing = uncovered_methods(views, version)
    assert not missing, f"vLLM {version}: not covered {missing}; did not serve: {not_served}"


def test_every_trial_measured_its_own_energy_over_a_long_enough_window(study: GpuStudy) -> None:
    # Every finished trial whose server could serve ran its workload; an infeasible one (its
    # server failed to start or died at its first request) has no run to measure.
    measured = [t for t in _finished(study.trials()) if not t.user_attrs.get(TrialAttr.INFEASIBLE)]
    assert measured and measured[0].user_attrs[TrialAttr.ROLE] == "baseline"
    store = Store(study.url)
    try:
        per_trial = {t.number: store.workload_runs(STUDY, t.number) for t in measured}
    finally:
        store.close()
    assert all(per_trial.values()), {n: len(r) for n, r in per_trial.items()}
    runs = [r.record for trial_runs in per_trial.values() for r in trial_runs]
    scored = load_preset(model="tiny-hybrid-mtp", gpu="h200").workload.tasks
    for run in runs:
        if run.tasks < scored:  # a pruned run stopped early; its window is shorter
            continue
        assert run.energy_joules is not None and run.energy_joules > 0
        assert run.scored_wall_s >= 60.0


def test_the_vllm_version_and_lacking_knobs_are_recorded(study: GpuStudy) -> None:
    attrs = study.attrs()
    version = str(attrs[StudyAttr.VLLM_VERSION])
    assert version and version[0].isdigit()
    lacks = list(attrs[StudyAttr.VLLM_LACKS])  # type: ignore[call-overload]
    if "disable_eagle_block_drop" in lacks:
        assert "disable_eagle_block_drop: not searched" in study.optimize.stderr
        searched = {k for t in study.trials() for k in t.params}
        assert "disable_eagle_block_drop" not in searched


def test_no_trial_failed_on_a_knob_the_vllm_lacks(study: GpuStudy) -> None:
    kinds = [t.user_attrs.get(TrialAttr.FAILURE_KIND) for t in study.trials()]
    assert "invalid_speculative_config" not in kinds
    reasons = " ".join(str(t.user_attrs.get(TrialAttr.FAILURE_REASON, "")) for t in study.trials())
    assert "unrecognized arguments" not in reasons


def test_export_report_and_explain_read_the_study(study: GpuStudy) -> None:
    export = run_tuner(
        study.out, "export", "export", "--storage", study.url, timeout_s=300, env=study.env
    )
    assert export.returncode == 0, export.stderr
    assert "vllm serve" in export.stdout and "tiny-hybrid-mtp" in export.stdout
    assert "CUDA_VISIBLE_DEVICES" not in export.stdout  # the slot's GPU pin stays here
    report = run_tuner(
        study.out,
        "report",
        "report",
        "--storage",
        study.url,
        "--out",
        str(study.out / "report"),
        timeout_s=300,
        env=study.env,
    )
    assert report.returncode == 0, report.stderr
    assert (study.out / "report" / "report.html").is_file()
    explain = run_tuner(
        study.out,
        "explain",
        "explain",
        "--study",
        STUDY,
        "--storage",
        study.url,
        "--json",
        timeout_s=1800,
        env=study.env,
    )
    assert explain.returncode == 0, explain.stderr[-3000:]
    payload = json.loads(explain.stdout)
    assert payload["rows"] and payload["sentence"]
    results = load_results(study.url, STUDY)
    assert len(results.trials) >= N_TRIALS
