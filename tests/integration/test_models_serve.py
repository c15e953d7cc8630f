"""`tuner models prepare` builds models that real vLLM CPU servers load and answer with."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tuner.server import ServerSpec
from tuner.testing import ServerPool

pytestmark = pytest.mark.vllm


def test_prepare_is_idempotent_and_prints_the_path(cache_dir: Path, smollm2_path: Path) -> None:
    before = (smollm2_path / "model.safetensors").stat().st_mtime_ns
    out = subprocess.run(
        ["tuner", "models", "prepare", "smollm2-135m"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TUNER_CACHE_DIR": str(cache_dir)},
    ).stdout.strip()
    assert Path(out) == smollm2_path
    assert (smollm2_path / "model.safetensors").stat().st_mtime_ns == before  # not rebuilt
    config = json.loads((smollm2_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config


def test_smollm2_answers_a_chat_request(vllm_pool: ServerPool, smollm2_spec: ServerSpec) -> None:
    server = vllm_pool.get(smollm2_spec)
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={
            "model": smollm2_spec.served_model_name,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16,
            "temperature": 0,
        },
        timeout=120,
    )
    response.raise_for_status()
    body = response.json()
    text = body["choices"][0]["message"]["content"]
    # The content itself is the 135M model's business (greedy bf16 on vLLM answered
    # "L'Étoile, la Marseillaise, ..." where float32 transformers says "Paris"): it must be text.
    assert text.strip()
    assert body["usage"]["completion_tokens"] > 0
    assert body["choices"][0]["finish_reason"] in ("stop", "length")


def test_tiny_hybrid_config_is_a_qwen3_next_with_mtp(tiny_hybrid_path: Path) -> None:
    config = json.loads((tiny_hybrid_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    assert config["num_nextn_predict_layers"] == 1
    assert config["head_dim"] == 64
    assert config["layer_types"] == ["linear_attention", "full_attention"] * 2
    assert (tiny_hybrid_path / "tokenizer.json").is_file()
