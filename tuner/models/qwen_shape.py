"""A Qwen3.5-architecture text config at 27B scale (Qwen3.8-27B's shape), served with dummy weights.

The published card runs Qwen3.8-27B at 4 bits on a 24 GB card; its weights are not here. This
builds the same architecture (64 layers, 3 Gated DeltaNet : 1 full attention, hidden 5120,
24 query / 4 KV heads of 256, linear-attention heads 16 key / 48 value of 128, one MTP layer)
with an AWQ 4-bit `quantization_config`, so `vllm serve --load-format dummy
--language-model-only` allocates what the real model would, apart from what NOTE.md lists
(docs/gpu-validation.md has what it measured on an H200). The tokenizer is SmolLM2's, so the
vocabulary is 49,152 instead of 248,320: `vocab_bytes_missing()` is the embedding and lm_head
memory that the stand-in lacks (a preset adds it back as `gpu.emulate_extra_gib`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "HIDDEN_SIZE",
    "REAL_VOCAB_SIZE",
    "build_qwen_shape",
    "qwen_shape_config",
    "vocab_bytes_missing",
]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
HIDDEN_SIZE = 5120
NUM_LAYERS = 64
FULL_ATTENTION_INTERVAL = 4  # every 4th layer is full attention: 3 Gated DeltaNet : 1 attention
REAL_VOCAB_SIZE = 248_320  # Qwen3.5's tokenizer (the real checkpoint's embed and lm_head rows)
BF16_BYTES = 2
# AWQ leaves these in bf16: the MTP layer (the H200 run: 13.3 GiB of weights, 14.1 with
# MTP), the vision tower (not built under --language-model-only) and the tiny Gated DeltaNet
# b/a projections (48 outputs each; Marlin's tiles are 64 wide).
NOT_QUANTIZED = ("visual", "mtp", "in_proj_b", "in_proj_a")


def qwen_shape_config(vocab_size: int) -> dict[str, Any]:
    """The config.json of the stand-in: Qwen3_5ForConditionalGeneration, text as the real one."""
    layer_types = [
        "full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
        for i in range(NUM_LAYERS)
    ]
    text_config: dict[str, Any] = {
        "model_type": "qwen3_5_text",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": 17408,
        "num_hidden_layers": NUM_LAYERS,
        "layer_types": layer_types,
        "full_attention_interval": FULL_ATTENTION_INTERVAL,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "attn_output_gate": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "linear_conv_kernel_dim": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "initializer_range": 0.02,
        "max_position_embeddings": 262144,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000_000,
            "partial_rotary_factor": 0.25,
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
        },
        "tie_word_embeddings": False,
        "use_cache": True,
        "dtype": "bfloat16",
        # SmolLM2's special tokens (<|im_start|> 1, <|im_end|> 2): the tokenizer is SmolLM2's.
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config,
        # Never built under --language-model-only; kept so the config is the real model's type.
        "vision_config": {
            "model_type": "qwen3_5",
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "out_hidden_size": HIDDEN_SIZE,
        },
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 128,
            "zero_point": True,
            "version": "gemm",
            "modules_to_not_convert": list(NOT_QUANTIZED),
        },
    }


def vocab_bytes_missing(vocab_size: int) -> int:
    """Bytes of embed_tokens + lm_head (bf16, untied) the real vocabulary has and this lacks."""
    return 2 * (REAL_VOCAB_SIZE - vocab_size) * HIDDEN_SIZE * BF16_BYTES


def _note(vocab_size: int) -> str:
    missing = vocab_bytes_missing(vocab_size)
    return f"""# qwen3.8-27b-shape: what differs from the real Qwen3.8-27B-AWQ checkpoint

Built by `tuner models prepare qwen3.8-27b-shape`. A config and a tokenizer, no weights: vLLM
serves it with `--load-format dummy --language-model-only` (random weights).

- Architecture: Qwen3.5 text model at 27B scale, as the real one: {NUM_LAYERS} layers, 3 Gated
  DeltaNet : 1 full attention, hidden {HIDDEN_SIZE}, 24 query / 4 KV heads of 256, linear heads
  16 key / 48 value of 128, one MTP layer (`mtp_num_hidden_layers: 1`).
- Vocabulary: {vocab_size:,} (SmolLM2's tokenizer) instead of {REAL_VOCAB_SIZE:,}. The embedding
  and lm_head (bf16, untied) are {missing:,} bytes ({missing / 2**30:.2f} GiB) smaller than the
  real model's; a preset that emulates the real card adds them back (`gpu.emulate_extra_gib`).
  Logits buffers are smaller by the same ratio.
- Quantization: AWQ 4-bit, group size 128, zero point; not quantized: {", ".join(NOT_QUANTIZED)}
  (the real checkpoint's list may differ; its weights decide).
- Weights: dummy (`--load-format dummy`): the model repeats one token, so acceptance rates of
  n-gram and MTP mean nothing; memory, startup, failures and load shape do.
- Vision tower: in the config (the real model is multimodal), never built
  (`--language-model-only`).
"""


def build_qwen_shape(target: Path, tokenizer_dir: Path) -> None:
    """Write config.json, NOTE.md and a copy of the tokenizer from `tokenizer_dir`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            shutil.copy2(tokenizer_dir / name, target / name)
    vocab = int(json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"])
    (target / "config.json").write_text(json.dumps(qwen_shape_config(vocab), indent=2))
    (target / "NOTE.md").write_text(_note(vocab))
