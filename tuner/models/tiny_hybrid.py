"""A tiny Qwen3-Next-style hybrid model (Gated DeltaNet + attention, one MTP layer).

Only a config and a tokenizer: vLLM serves it with `--load-format dummy` (random weights), which
is enough to exercise hybrid-model memory accounting and MTP speculation on the CPU build
(docs/vllm-facts.md, test models). The tokenizer is SmolLM2's, so its vocabulary size is used.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["TOKENIZER_FILES", "build_tiny_hybrid", "tiny_hybrid_config"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def tiny_hybrid_config(vocab_size: int) -> dict[str, object]:
    """Four layers alternating linear and full attention, head_dim 64, one MTP layer."""
    from transformers import Qwen3NextConfig

    config = Qwen3NextConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,  # the CPU attention backend accepts 64 (not Qwen3-Next's 256 at this size)
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=128,
        max_position_embeddings=8192,
        layer_types=["linear_attention", "full_attention"] * 2,
        tie_word_embeddings=False,
    ).to_dict()
    config.update(
        architectures=["Qwen3NextForCausalLM"],
        num_nextn_predict_layers=1,
        torch_dtype="bfloat16",
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    config.pop("_name_or_path", None)
    return config


def build_tiny_hybrid(target: Path, tokenizer_dir: Path) -> None:
    """Write config.json and a copy of the tokenizer from `tokenizer_dir` into `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            shutil.copy2(tokenizer_dir / name, target / name)
    vocab = json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]
    (target / "config.json").write_text(json.dumps(tiny_hybrid_config(vocab), indent=2))
