"""A slow box gets a smaller workload, once per study: calibration through the real driver.

The study loop runs on Ray with the fake vLLM (`tuner.testing.fake_vllm`, a named fake: the
point is the driver's plan and storage, and a real CPU server takes minutes a trial), made slow
with its knobs: FAKE_VLLM_TOKEN_DELAY_S per output token, FAKE_VLLM_PREFILL_DELAY_S per
uncached prompt token. The preset's 12 tasks need well over its 5 s target window at those
speeds (12 tasks write about 1,800 tokens: 18 s at 100 tok/s), so the first server picks the
smallest sizing, 8 tasks (4 per agent), and every later trial of the study runs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from tests.integration.conftest import fake_options, fake_preset, fake_vllm_ray
from tuner.attrs import StudyAttr
from tuner.errors import ConfigError
from tuner.storage import Store
from tuner.study import Preset, optimize

pytestmark = pytest.mark.ray

SLOW = {
    "FAKE_VLLM_STARTUP_S": "0.5",
    "FAKE_VLLM_TOKEN_DELAY_S": "0.01",
    "FAKE_VLLM_PREFILL_DELAY_S": "0.0002",
}


@pytest.fixture(scope="module")
def fake_ray() -> Iterator[None]:
    """Local Ray; its workers start the fake server as `vllm`."""
    with fake_vllm_ray(num_gpus=0):
        yield


def _preset() -> Preset:
    data = fake_preset(
        SLOW,
        tasks=12,
        tool_latency_s=0.0,
        gpu={"name": "cpu", "cpu": True},
        throughput_streams=[1],
        throughput_requests=2,
        throughput_output_tokens=8,
        target_window_s=5.0,
    )
    return Preset.model_validate(data)


def _scored_tasks(url: str, study: str, number: int) -> int:
    store = Store(url)
    try:
        (run,) = store.workload_runs(study, number)
    finally:
        store.close()
    return run.record.tasks


def test_a_slow_server_scales_the_workload_once_per_study(
    fake_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = _preset()
    options = fake_options(tmp_path, 1)
    optimize(preset, options)
    err = capsys.readouterr().err
    assert "workload: sized on the first server start" in err, err
    line = next(x for x in err.splitlines() if x.startswith("calibrated on trial 0: "))
    assert "workload scaled to 8 tasks" in line and "5 s window" in line, line
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    stored = study.user_attrs[StudyAttr.CALIBRATION]
    assert stored["scaled"] is True and stored["trial_number"] == 0
    assert stored["workload"]["tasks"] == 8
    assert stored["prefill_tps"] > 0 and stored["decode_tps"] > 0
    # The stored preset is what trials run (confirm, explain and sweep run it).
    assert study.user_attrs[StudyAttr.PRESET]["workload"]["tasks"] == 8
    assert _scored_tasks(options.storage_url, "fake", 0) == 8

    # Resumed with the same preset file: the stored sizing, no second calibration.
    optimize(preset, replace(options, n_trials=1))
    err = capsys.readouterr().err
    assert "workload: this study's sizing, calibrated on trial 0" in err, err
    assert "calibrated on trial 1" not in err
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    assert study.user_attrs[StudyAttr.CALIBRATION] == stored
    assert _scored_tasks(options.storage_url, "fake", 1) == 8

    # --no-calibrate cannot change a calibrated study's sizing: one line, nothing run.
    with pytest.raises(ConfigError, match="--no-calibrate cannot change a study's sizing"):
        optimize(preset, replace(options, calibrate=False))
    assert len(optuna.load_study(study_name="fake", storage=options.storage_url).trials) == 2


@pytest.mark.extended  # out of CI since 2026-12-07: CI's minutes on a Zen 3 (docs/ci.md)
def test_no_calibrate_keeps_the_preset_sizing(
    fake_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = replace(fake_options(tmp_path, 1), calibrate=False)
    optimize(_preset(), options)
    err = capsys.readouterr().err
    assert "not calibrated (--no-calibrate)" in err and "calibrated on trial" not in err
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    assert study.user_attrs[StudyAttr.CALIBRATION] == {
        "calibrated": False,
        "why": "--no-calibrate",
    }
    assert _scored_tasks(options.storage_url, "fake", 0) == 12
    # Resumed without the flag: the study keeps the sizing its trials were measured with.
    optimize(_preset(), replace(options, calibrate=True))
    assert "workload: the preset's sizing (--no-calibrate)" in capsys.readouterr().err
    assert _scored_tasks(options.storage_url, "fake", 1) == 12
