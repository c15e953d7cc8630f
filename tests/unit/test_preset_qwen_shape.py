"""The `qwen3.8-27b-shape/h200` preset: the published table's three configs on an emulated
24 GiB budget, with prefix caching on and the published workload's shape.

Numbers are hand-computed in comments: the H200 fraction of the baseline's 0.92 of 24 GiB less
the 3.80 GiB of vocabulary the stand-in lacks, and the prompt sizes of its replay workload.
"""

from __future__ import annotations

import pytest

from tuner.errors import ConfigError
from tuner.study.preflight.sizing import MIN_SCORED_S, check_sizing, size_workload
from tuner.study.space import Preset, load_preset


@pytest.fixture(scope="module")
def preset() -> Preset:
    return load_preset(model="qwen3.8-27b-shape", gpu="h200")


def test_it_emulates_a_24_gib_card_without_the_missing_vocabulary(preset: Preset) -> None:
    assert preset.gpu.emulate_memory_gib == 24
    # 4,078,960,640 bytes of embed_tokens + lm_head (tests/unit/test_models_qwen_shape.py)
    assert preset.gpu.emulate_extra_gib == pytest.approx(4_078_960_640 / 2**30, abs=0.005)
    assert preset.model.prepare == "qwen3.8-27b-shape"


def test_it_measures_exactly_the_published_configs_at_one_memory_setting(preset: Preset) -> None:
    from tuner.study.search.sampling import enumerate_space

    configs = enumerate_space(preset)
    assert configs is not None
    assert sorted(c["method"] for c in configs) == ["mtp", "ngram", "none"]
    # The same memory for all three, so `--n-trials 3` measures each once and the table
    # compares methods, not memory settings.
    for c in configs:
        assert (c["gpu_memory_utilization"], c["max_num_seqs"], c["max_num_batched_tokens"]) == (
            0.92,
            4,
            4096,
        )
        assert c.get("num_speculative_tokens", 1) == 1


def test_the_baseline_is_a_server_that_starts_on_the_budget(preset: Preset) -> None:
    params = preset.baseline_params()
    assert params == {
        "method": "none",
        "gpu_memory_utilization": 0.92,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 4096,
    }
    spec = preset.server_spec(params, model_path="/m")
    # (0.92 x 24 - 3.80) / 140.4 = 18.28 / 140.4 = 0.13020
    assert spec.gpu_memory_utilization == 0.1302
    argv = spec.serve_command()
    for flag in ("--language-model-only", "--load-format dummy", "--gdn-prefill-backend triton"):
        assert flag in argv
    # Prefix caching on, as on the published card (vLLM picks mamba_cache_mode align).
    assert "--enable-prefix-caching" in argv and "--no-enable-prefix-caching" not in argv


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


def test_the_replay_workload_grows_prompts_to_the_context_limit(preset: Preset) -> None:
    w = preset.workload
    assert (w.mode, w.agents) == ("replay", 4)
    # 13 steps a task, each adding a ~1,100-token tool output and a ~48-token call: from a
    # 600-token prefix to about 600 + 12 x 1,150 = 14,400 tokens, under the 16,384 limit.
    s = w.shape
    assert s.steps_min == s.steps_max == 13
    assert 1_000 <= s.tool_output_median_tokens <= 1_200
    assert s.max_context_tokens < preset.model.max_model_len == 16_384
    assert s.shared_prefix_tokens + 12 * s.tool_output_median_tokens > 12_000
    # Its window is bounded by prefills, not tools: the measured one, and the task count the
    # preset showed to separate its effects, are what preflight checks (issue 46).
    sizing = size_workload(w)
    assert sizing.floor_s < MIN_SCORED_S
    assert w.measured_scored_s is not None
    assert w.separating_tasks is not None and w.tasks >= w.separating_tasks
    check_sizing(w, where="the preset")  # passes as it stands
    with pytest.raises(ConfigError, match="use at least"):
        check_sizing(w.model_copy(update={"tasks": w.separating_tasks - 1}), where="the preset")


def test_the_h100_preset_gives_the_server_the_same_gib_as_the_h200_one(preset: Preset) -> None:
    """The device tool lends H100s for work that fits 80 GB: the rehearsal on one must give
    each server the emulated card's 18.28 GiB, not 0.1302 of an H100 (10.4 GiB, under the
    weights), and differ from the H200 preset in nothing but the card and what a run cost on it."""
    h100 = load_preset(model="qwen3.8-27b-shape", gpu="h100")
    spec = h100.server_spec(h100.baseline_params(), model_path="/m")
    # (0.92 x 24 - 3.80) / 79.6 = 18.28 / 79.6 = 0.22965
    assert spec.gpu_memory_utilization == 0.2296
    assert spec.gpu_memory_utilization * 79.6 == pytest.approx(18.28, abs=0.01)
    skip = {"gpu", "recorded_run"}
    assert h100.model_dump(exclude=skip) == preset.model_dump(exclude=skip)
    assert h100.gpu.model_dump(exclude={"name", "memory_gib"}) == preset.gpu.model_dump(
        exclude={"name", "memory_gib"}
    )


def test_a_preset_that_extends_a_missing_file_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "a.yaml").write_text("extends: nowhere.yaml\ngpu: {name: x}\n")
    (tmp_path / "b.yaml").write_text("model: {name: m}\n")
    with pytest.raises(
        ConfigError,
        match=r"extends: nowhere.yaml is not a preset file beside it; "
        r"name one of a.yaml, b.yaml",
    ):
        load_preset(space=tmp_path / "a.yaml")
