"""GPU presets judge their verdicts with the noise measured on a GPU, not the CPU build's.

The figure is the paired between-start noise that `scripts/gpu_study_summary.py` wrote from
three fresh starts each of two configs on H200s (benchmarks/data/
qwen3.8-27b-shape-h200-prefix-caching.json); a CPU preset keeps `tuner.metrics.DEFAULT_NOISE`.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from tuner.metrics import DEFAULT_NOISE
from tuner.study.space import load_preset
from tuner.study.stages.confirm_verdicts import store_noise

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "benchmarks" / "data" / "qwen3.8-27b-shape-h200-prefix-caching.json"
GPU_PRESETS = [
    ("qwen3.8-27b-shape", "h200"),
    ("smollm2-135m", "h200"),
    ("tiny-hybrid-mtp", "h200"),
    ("qwen3.8-27b", "rtx4090"),
    ("qwen3.8-27b", "rtx-pro-6000"),
]


@pytest.mark.parametrize(("model", "gpu"), GPU_PRESETS)
def test_gpu_presets_carry_the_measured_gpu_noise(model: str, gpu: str) -> None:
    measured = json.loads(SUMMARY.read_text())["between_start_noise"]
    preset = load_preset(model=model, gpu=gpu)
    assert preset.between_run is not None
    assert preset.between_run.log_sd == measured["log_sd_paired_ratio"]
    assert preset.between_run.df == measured["df"]
    # It is what a study on the preset stores and judges with.
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    noise = store_noise(study, preset)
    assert (noise.log_sd, noise.df) == (0.0786, 4)
    assert noise.log_sd != DEFAULT_NOISE.log_sd


@pytest.mark.parametrize("model", ["smollm2-135m", "tiny-hybrid-mtp"])
def test_cpu_presets_keep_the_cpu_prior(model: str) -> None:
    preset = load_preset(model=model, gpu="cpu")
    assert preset.between_run is None
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    assert store_noise(study, preset) == DEFAULT_NOISE
