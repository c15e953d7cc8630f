"""The search's re-runs of the baseline, through the real driver and Ray workers, on a fake vLLM
whose machine drifts.

`tuner.testing.fake_vllm` is the named fake: `FAKE_VLLM_DRIFT` makes every server it starts
serve a constant share faster than the one started before it (the recorded sessions drifted
about 0.5% a run, benchmarks/data/noise-model.json; here 20%, so the drift stands well above
the fake's own timing jitter on a 2-core box). A copy of the baseline (`--also-try baseline`)
starts one server later than the baseline, so on raw scores it looks faster; against the
baseline's rate interpolated between its starts at runs 0 and 2 it does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tests.integration.conftest import fake_options, fake_preset, fake_vllm_ray
from tuner.attrs import Role
from tuner.metrics import paired_ratio
from tuner.results import choose_export, load_results
from tuner.results.decision import judge_study
from tuner.study import Preset, optimize
from tuner.study.search.roles import counts_toward_budget, role_of

pytestmark = pytest.mark.ray

DRIFT = 0.2


@pytest.fixture(scope="module")
def fake_ray() -> Iterator[None]:
    with fake_vllm_ray(num_gpus=1):
        yield


def test_a_copy_of_the_baseline_on_a_drifting_machine_is_not_faster_drift_corrected(
    fake_ray: None, tmp_path: Path
) -> None:
    server_env = {
        "FAKE_VLLM_STARTUP_S": "0.3",
        "FAKE_VLLM_TOKEN_DELAY_S": "0.01",
        "FAKE_VLLM_DRIFT": str(DRIFT),
        "FAKE_VLLM_DRIFT_FILE": str(tmp_path / "starts"),
    }
    preset = Preset.model_validate(
        fake_preset(
            server_env,
            tasks=6,
            tool_latency_s=0.0,
            gpu={"name": "fake1", "memory_gib": 24, "count": 1},
            throughput_streams=[],
        )
    )
    options = dataclasses.replace(
        fake_options(tmp_path, 3), also_try_baseline=True, baseline_every=1
    )
    optimize(preset, options)
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    # The baseline, its copy, the baseline again (due after 1 candidate), the n-gram candidate.
    assert [role_of(t) for t in study.trials] == [
        "baseline", "candidate", "baseline_rerun", "candidate"
    ]  # fmt: skip
    assert sum(counts_toward_budget(t) for t in study.trials) == 3  # the re-run is not counted

    results = load_results(options.storage_url, "fake")
    base = results.baseline
    copy = next(t for t in results.trials if t.copy_of is not None)
    assert base is not None and base.outcomes is not None and copy.outcomes is not None
    raw = paired_ratio([copy.outcomes], [base.outcomes])
    assert raw is not None and raw.ratio > 1.08, raw.ratio  # the drift alone: "faster"
    verdict = judge_study(results)[copy.number]
    assert verdict.drift is not None and (verdict.drift.before, verdict.drift.after) == (0, 2)
    assert verdict.paired is not None and 0.94 < verdict.paired.ratio < 1.06, verdict.paired
    assert not verdict.beats_baseline
    line = choose_export(results).noise
    assert "1 re-run of the baseline during the search, every 1 trial;" in line
    assert results.baseline_reruns()[0].role == Role.BASELINE_RERUN
