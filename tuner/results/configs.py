"""What a config is in words, how its steps reused the cache, and what a workload mode means.

Small vocabulary shared by loading, export, report and plots, and by the study's live view
(`describe_config_short`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.workload.reuse import COUNTED_REUSE_CLASSES

__all__ = ["MODE_NOTES", "ReuseCounts", "describe_config", "describe_config_short"]

# What a study's numbers mean in each workload mode; replay forces turn lengths and grades nothing.
MODE_NOTES = {
    "replay": "load shape: answers not graded",
    "live": "live: the model's answers graded by each task's checker",
    "traces": "your recorded traces replayed: load shape, answers not graded",
}

_METHOD_NAMES = {
    "ngram": "n-gram",
    "mtp": "MTP",
    "eagle": "EAGLE",
    "eagle3": "EAGLE-3",
    "draft_model": "draft model",
    "suffix": "suffix",
}


@dataclass(frozen=True)
class ReuseCounts:
    """How many scored steps reused their previous prompt in each way (docs/workload.md).

    The first step of a task has nothing to reuse and is not counted: the fields are
    `tuner.workload.reuse.COUNTED_REUSE_CLASSES`.
    """

    all: int = 0
    one_block_short: int = 0
    partial: int = 0
    none: int = 0

    @property
    def total(self) -> int:
        """Steps counted (first steps of tasks excluded)."""
        return self.all + self.one_block_short + self.partial + self.none

    def fractions(self) -> dict[str, float]:
        """Share of steps per class, in `COUNTED_REUSE_CLASSES` order (empty: nothing counted)."""
        if self.total == 0:
            return {}
        return {name: getattr(self, name) / self.total for name in COUNTED_REUSE_CLASSES}


def describe_config(params: Mapping[str, Any]) -> str:
    """A config in words: "n-gram depth 3 (lookup 2-5), KV 2.00 GB, max seqs 8"."""
    method = str(params.get("method", "none"))
    if method == "none":
        parts = ["no speculation"]
    else:
        text = f"{_METHOD_NAMES.get(method, method)} depth {params.get('num_speculative_tokens')}"
        if "prompt_lookup_min" in params or "prompt_lookup_max" in params:
            text += f" (lookup {params.get('prompt_lookup_min')}-{params.get('prompt_lookup_max')})"
        if params.get("disable_eagle_block_drop"):
            text += ", last block kept"
        parts = [text]
    if params.get("kv_cache_memory_bytes") is not None:
        parts.append(f"KV {float(params['kv_cache_memory_bytes']) / 1e9:.2f} GB")
    if params.get("gpu_memory_utilization") is not None:
        parts.append(f"gpu mem {float(params['gpu_memory_utilization']):.2f}")
    if params.get("max_num_seqs") is not None:
        parts.append(f"max seqs {params['max_num_seqs']}")
    return ", ".join(parts)


def describe_config_short(params: Mapping[str, Any]) -> str:
    """A config in a live view's column: "ngram d3 [2,5] seqs 8 kv 2.0GB" (`describe_config`
    says the same in words)."""
    parts = [str(params.get("method", "none"))]
    if "num_speculative_tokens" in params:
        parts.append(f"d{params['num_speculative_tokens']}")
    if "prompt_lookup_min" in params:
        parts.append(f"[{params['prompt_lookup_min']},{params.get('prompt_lookup_max')}]")
    if "gpu_memory_utilization" in params:
        parts.append(f"mem {params['gpu_memory_utilization']:.2f}")
    if "kv_cache_memory_bytes" in params:
        parts.append(f"kv {params['kv_cache_memory_bytes'] / 1e9:.1f}GB")
    if "max_num_seqs" in params:
        parts.append(f"seqs {params['max_num_seqs']}")
    if params.get("disable_eagle_block_drop"):
        parts.append("keep-block")
    return " ".join(parts)
