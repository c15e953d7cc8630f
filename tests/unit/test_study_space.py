"""Presets: every shipped one loads; bad ones fail in one line; the space is conditional."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from tuner.errors import ConfigError
from tuner.study.space import known_presets, load_preset, preset_dir


def test_shipped_presets_load() -> None:
    names = known_presets()
    assert ("smollm2-135m", "cpu") in names
    assert ("tiny-hybrid-mtp", "cpu") in names
    assert ("qwen3.8-27b", "rtx4090") in names
    assert ("qwen3.8-27b", "rtx-pro-6000") in names
    for model, gpu in names:
        preset = load_preset(model=model, gpu=gpu)
        assert preset.study_name == f"{model}-{gpu}"
        assert preset.baseline_params()["method"] == "none"


def test_published_setup_preset() -> None:
    p = load_preset(model="qwen3.8-27b", gpu="rtx4090")
    assert p.model.max_model_len == 16384
    assert p.workload.agents == 4 and p.workload.tasks == 192
    assert p.workload.request_options == {"chat_template_kwargs": {"enable_thinking": False}}
    assert p.model.hybrid and p.model.mtp_layers == 1
    assert p.baseline_params() == {
        "method": "none",
        "gpu_memory_utilization": 0.92,
        "max_num_seqs": 512,
    }


def test_unknown_preset_lists_known() -> None:
    with pytest.raises(ConfigError) as err:
        load_preset(model="llama-9", gpu="cpu")
    assert "--model smollm2-135m --gpu cpu" in str(err.value)


def test_typo_in_space_file_is_one_line(tmp_path: Path) -> None:
    data = yaml.safe_load((preset_dir() / "smollm2-135m" / "cpu.yaml").read_text())
    data["space"]["max_num_seq"] = [4]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_preset(space=path)
    assert str(path) in str(err.value) and "space.max_num_seq" in str(err.value)


def test_mtp_needs_mtp_layers(tmp_path: Path) -> None:
    data = yaml.safe_load((preset_dir() / "smollm2-135m" / "cpu.yaml").read_text())
    data["space"]["methods"] = ["none", "mtp"]
    path = tmp_path / "mtp.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="MTP layers"):
        load_preset(space=path)


def test_suggest_is_conditional_and_builds_valid_specs() -> None:
    preset = load_preset(model="qwen3.8-27b", gpu="rtx4090")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        params = preset.suggest(trial)
        method = params["method"]
        seen.add(method)
        assert ("num_speculative_tokens" in params) == (method != "none")
        assert ("prompt_lookup_min" in params) == (method == "ngram")
        if method == "ngram":
            assert params["prompt_lookup_min"] <= params["prompt_lookup_max"]
        assert ("disable_eagle_block_drop" in params) == (method == "mtp")
        spec = preset.server_spec(params, model_path="Qwen/Qwen3.8-27B-AWQ")
        config = spec.speculative.config() if spec.speculative else None
        assert (config or {}).get("method", "none") == method
        assert spec.max_num_seqs == params["max_num_seqs"]
        study.tell(trial, 1.0)
    assert seen == {"none", "ngram", "mtp"}


def test_enqueued_baseline_is_replayed_exactly() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    study = optuna.create_study()
    study.enqueue_trial(preset.baseline_params())
    trial = study.ask()
    assert preset.suggest(trial) == {
        "method": "none",
        "kv_cache_memory_bytes": 2_000_000_000,
        "max_num_seqs": 8,
    }


def test_cpu_preset_uses_the_documented_cpu_shape() -> None:
    from tuner.workload import SuiteShape

    preset = load_preset(model="smollm2-135m", gpu="cpu")
    assert preset.workload.shape == SuiteShape.cpu_small()
    assert preset.workload.tool_protocol == "text"  # SmolLM2 has no tool parser in vLLM
