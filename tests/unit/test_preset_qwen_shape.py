"""The `qwen3.8-27b-shape/h200` preset: the rtx4090 space on an emulated 24 GiB budget.

Numbers are hand-computed in comments: the H200 fraction of the baseline's 0.92 of 24 GiB less
the 3.80 GiB of vocabulary the stand-in lacks, and the sizing floor of its replay workload.
"""

from __future__ import annotations

import pytest

from tuner.study.preflight.sizing import MIN_SCORED_S, size_workload
from tuner.study.space import Preset, load_preset


@pytest.fixture(scope="module")
def preset() -> Preset:
    return load_preset(model="qwen3.8-27b-shape", gpu="h200")


def test_it_emulates_a_24_gib_card_without_the_missing_vocabulary(preset: Preset) -> None:
    assert preset.gpu.emulate_memory_gib == 24
    # 4,078,960,640 bytes of embed_tokens + lm_head (tests/unit/test_models_qwen_shape.py)
    assert preset.gpu.emulate_extra_gib == pytest.approx(4_078_960_640 / 2**30, abs=0.005)
    assert preset.model.prepare == "qwen3.8-27b-shape"


def test_it_searches_the_rtx4090_space_and_the_token_budget(preset: Preset) -> None:
    card = load_preset(model="qwen3.8-27b", gpu="rtx4090")
    for name in ("methods", "num_speculative_tokens", "gpu_memory_utilization", "max_num_seqs"):
        assert getattr(preset.space, name) == getattr(card.space, name)
    assert preset.space.max_num_batched_tokens == (2048, 4096, 8192)


def test_the_baseline_is_a_server_that_starts_on_the_budget(preset: Preset) -> None:
    params = preset.baseline_params()
    assert params == {
        "method": "none",
        "gpu_memory_utilization": 0.92,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 4096,
    }
    spec = preset.server_spec(params, model_path="/m")
    # (0.92 x 24 - 3.80) / 140.4 = 18.28 / 140.4 = 0.13020
    assert spec.gpu_memory_utilization == 0.1302
    argv = spec.serve_command()
    for flag in ("--language-model-only", "--load-format dummy", "--gdn-prefill-backend triton"):
        assert flag in argv
    assert "--no-enable-prefix-caching" in argv


def test_mtp_depth_one_is_a_valid_server(preset: Preset) -> None:
    params = {
        "method": "mtp",
        "num_speculative_tokens": 1,
        "gpu_memory_utilization": 0.95,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 8192,
    }
    spec = preset.server_spec(params, model_path="/m")
    assert spec.speculative_config() == {"method": "mtp", "num_speculative_tokens": 1}
    assert spec.gpu_memory_utilization == 0.1353  # (22.8 - 3.80) / 140.4


def test_the_replay_workload_scores_at_least_a_minute(preset: Preset) -> None:
    assert preset.workload.mode == "replay"
    assert preset.workload.agents == 4
    sizing = size_workload(preset.workload)
    assert sizing.ok
    assert sizing.floor_s >= MIN_SCORED_S
