"""The study's dtype on a CPU preset: `model.dtype: by-cpu` made concrete, once per study.

vLLM's CPU build runs bf16 fast only on CPUs with bf16 instructions (`tuner.server.cpu`); on
others float32 prefilled 5.6x and decoded 1.85x faster (docs/vllm-facts.md). A preset that says
`by-cpu` gets float32 there and the model's own dtype elsewhere. float32 doubles the KV cache's
bytes per token, so the preset's `kv_cache_memory_bytes` choices (written for the model's
bf16) double too: each choice holds the same tokens, and 300 MB, which holds 13k bf16 tokens,
does not become too small for one 8,192-token sequence. The study stores the preset it ran, so
confirmation, explain and a resumed study run the same dtype; a study started on a CPU that
chose the other dtype is refused, since scores from two CPUs do not compare.
"""

from __future__ import annotations

from typing import Any

from tuner.errors import ConfigError
from tuner.server.cpu import BF16_FLAGS, cpu_flags
from tuner.study.space import Preset

__all__ = ["resolve_dtype"]


def _why(flags: frozenset[str]) -> str:
    have = sorted(flags & BF16_FLAGS)
    if have:
        return f"this CPU has {' and '.join(have)}"
    return f"this CPU has neither {' nor '.join(sorted(BF16_FLAGS))}"


def resolve_dtype(
    preset: Preset,
    *,
    stored: dict[str, Any] | None = None,
    study_name: str | None = None,
    cpuinfo: str | None = None,
) -> tuple[Preset, str | None]:
    """`preset` with `model.dtype: by-cpu` made concrete, and the one line that says so.

    Args:
        preset: The preset as loaded (any other dtype is returned unchanged, with no line).
        stored: The study's stored preset, when the study exists.
        study_name: The study's name, for the refusal's line.
        cpuinfo: The text of /proc/cpuinfo (read when None).

    Raises:
        ConfigError: The stored study runs the other dtype (it started on another CPU).
    """
    if preset.model.dtype != "by-cpu":
        return preset, None
    flags = cpu_flags(cpuinfo)
    chosen = "auto" if flags & BF16_FLAGS else "float32"
    if stored is not None:
        before = str((stored.get("model") or {}).get("dtype") or "auto")
        if before != chosen:
            name = study_name or preset.study_name
            raise ConfigError(
                f"study {name!r} runs its servers with dtype {before}, chosen by the CPU it "
                f"started on; {_why(flags)}, so it would run {chosen}, and scores from two "
                "CPUs do not compare: resume it on a CPU like its own, or use a new --study name"
            )
    model = preset.model.model_copy(update={"dtype": chosen})
    if chosen == "auto":
        return preset.model_copy(update={"model": model}), (
            f"dtype: the model's own (bf16): {_why(flags)}, with which vLLM's CPU build runs "
            "bf16 fast"
        )
    updates: dict[str, Any] = {"model": model}
    kv = preset.space.kv_cache_memory_bytes
    doubled = ""
    if kv is not None:
        updates["space"] = preset.space.model_copy(
            update={"kv_cache_memory_bytes": tuple(2 * c for c in kv)}
        )
        doubled = (
            f"; kv_cache_memory_bytes {list(kv)} -> {[2 * c for c in kv]}, the same tokens at "
            "float32's 4 bytes an element"
        )
    base_kv = preset.baseline.kv_cache_memory_bytes
    if base_kv is not None:
        updates["baseline"] = preset.baseline.model_copy(
            update={"kv_cache_memory_bytes": 2 * base_kv}
        )
    return preset.model_copy(update=updates), (
        f"dtype: float32, not the model's bf16: {_why(flags)}, where vLLM's CPU build "
        f"prefilled 5.6x faster in float32 (docs/vllm-facts.md){doubled}; the exported "
        "command carries --dtype float32"
    )
