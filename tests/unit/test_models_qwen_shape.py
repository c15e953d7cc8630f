"""`tuner models prepare qwen3.8-27b-shape`: the 27B-scale Qwen3.5 config the GPU preset serves.

The expectations are the architecture the issue names (64 layers, 3 Gated DeltaNet : 1
attention, hidden 5120, 24/4 heads of 256, linear heads 16/48 of 128, one MTP layer, AWQ 4-bit),
written out here, not read back from the builder; the config is then parsed by transformers'
and vLLM's own config loaders (no weights: the model is served with dummy ones).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.models import MODEL_NAMES, prepare
from tuner.models.qwen_shape import vocab_bytes_missing


@pytest.fixture(scope="module")
def shape_dir(cache_dir: Path) -> Path:
    return prepare("qwen3.8-27b-shape", cache_dir)


def test_it_is_a_preparable_model() -> None:
    assert "qwen3.8-27b-shape" in MODEL_NAMES


def test_the_prepared_directory_has_config_tokenizer_and_note_but_no_weights(
    shape_dir: Path,
) -> None:
    names = {p.name for p in shape_dir.iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "NOTE.md"} <= names
    assert not [n for n in names if n.endswith((".safetensors", ".bin", ".gguf"))]
    note = (shape_dir / "NOTE.md").read_text()
    # What differs from the real checkpoint, in numbers a reader can check.
    assert "49,152 (SmolLM2's tokenizer) instead of 248,320" in note
    assert "4,078,960,640 bytes (3.80 GiB)" in note
    assert "dummy" in note and "not quantized: visual, mtp" in note


def test_the_config_has_the_27b_architecture(shape_dir: Path) -> None:
    config = json.loads((shape_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    text = config["text_config"]
    assert text["num_hidden_layers"] == 64
    assert text["layer_types"].count("linear_attention") == 48
    assert text["layer_types"].count("full_attention") == 16
    assert text["layer_types"][:4] == ["linear_attention"] * 3 + ["full_attention"]
    assert (text["hidden_size"], text["num_attention_heads"], text["num_key_value_heads"]) == (
        5120,
        24,
        4,
    )
    assert text["head_dim"] == 256
    assert (text["linear_num_key_heads"], text["linear_num_value_heads"]) == (16, 48)
    assert (text["linear_key_head_dim"], text["linear_value_head_dim"]) == (128, 128)
    assert text["mtp_num_hidden_layers"] == 1
    assert text["vocab_size"] == 49152
    quant = config["quantization_config"]
    assert (quant["quant_method"], quant["bits"], quant["group_size"]) == ("awq", 4, 128)
    assert "mtp" in quant["modules_to_not_convert"]


def test_transformers_and_vllm_accept_the_config(shape_dir: Path) -> None:
    from transformers import AutoConfig
    from vllm.transformers_utils.config import get_config

    hf = AutoConfig.from_pretrained(str(shape_dir))
    assert type(hf).__name__ == "Qwen3_5Config"
    assert hf.text_config.num_hidden_layers == 64
    assert hf.text_config.linear_num_value_heads == 48
    served = get_config(str(shape_dir), trust_remote_code=False)
    assert served.architectures == ["Qwen3_5ForConditionalGeneration"]
    assert served.get_text_config().mtp_num_hidden_layers == 1


# Importing vLLM's quantization registry imports torch.jit users (a DeprecationWarning, not ours).
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_vllms_awq_config_reads_the_quantization_config(shape_dir: Path) -> None:
    from vllm.model_executor.layers.quantization import get_quantization_config

    quant = json.loads((shape_dir / "config.json").read_text())["quantization_config"]
    awq = get_quantization_config("awq").from_config(quant)
    assert awq.weight_bits == 4
    assert awq.group_size == 128
    assert "mtp" in awq.modules_to_not_convert


def test_the_missing_vocabulary_bytes_by_hand() -> None:
    # embed_tokens + lm_head, untied, bf16: 2 x (248,320 - 49,152) x 5120 x 2 bytes.
    assert vocab_bytes_missing(49152) == 4_078_960_640
    assert vocab_bytes_missing(248_320) == 0
