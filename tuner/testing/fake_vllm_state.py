"""The fake vLLM server's state (`tuner.testing.fake_vllm`): what its flags and environment made
it, the /metrics counters its handler threads add to, and its prefix "cache".

`State` reads the KV cache size (`FAKE_VLLM_KV_TOKENS`, `FAKE_VLLM_SPEC_KV_TOKENS`,
`--num-gpu-blocks-override`), whether it counts speculative drafts, and its token delay (a
speculative speed-up, a drifting machine: `FAKE_VLLM_DRIFT_FILE` counts the starts); it renders
/metrics in vLLM's names. Only the standard library is imported.
"""

from __future__ import annotations

import argparse
import math
import os
import threading

__all__ = ["BLOCK_SIZE", "Counters", "State"]

BLOCK_SIZE = 16


class Counters:
    """The /metrics counters; the handler threads add to them under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, float] = {
            "vllm:prompt_tokens_total": 0,
            "vllm:generation_tokens_total": 0,
            "vllm:prefix_cache_queries_total": 0,
            "vllm:prefix_cache_hits_total": 0,
            "vllm:prompt_tokens_cached_total": 0,
            "vllm:num_preemptions_total": 0,
            "vllm:request_success_total": 0,
            "vllm:spec_decode_num_drafts_total": 0,
            "vllm:spec_decode_num_draft_tokens_total": 0,
            "vllm:spec_decode_num_accepted_tokens_total": 0,
        }

    def add(self, **deltas: float) -> None:
        with self.lock:
            for key, delta in deltas.items():
                self.values[f"vllm:{key}_total"] += delta


class State:
    """What the handlers need: the parsed flags, the counters and the prefix 'cache'."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.kv_tokens = int(os.environ.get("FAKE_VLLM_KV_TOKENS", "12345"))
        if args.speculative_config and os.environ.get("FAKE_VLLM_SPEC_KV_TOKENS"):
            self.kv_tokens = int(os.environ["FAKE_VLLM_SPEC_KV_TOKENS"])
        if args.num_gpu_blocks_override is not None:
            self.kv_tokens = args.num_gpu_blocks_override * BLOCK_SIZE
        self.spec = bool(args.speculative_config) or os.environ.get("FAKE_VLLM_SPEC") == "1"
        speculative = bool(args.speculative_config)
        self.changes_outputs = speculative and os.environ.get("FAKE_VLLM_CHANGE_OUTPUTS") == "1"
        speedup = float(os.environ.get("FAKE_VLLM_SPEC_SPEEDUP", "1")) if speculative else 1.0
        self.token_delay_s = float(os.environ.get("FAKE_VLLM_TOKEN_DELAY_S", "0")) / speedup
        self.token_delay_s *= math.exp(-float(os.environ.get("FAKE_VLLM_DRIFT", "0")) * _starts())
        self.counters = Counters()
        self.seen_prompts: list[str] = []
        self.seen_lock = threading.Lock()
        self.chats = 0  # chat requests received (the failure modes count them)
        self.chats_lock = threading.Lock()

    def next_chat(self) -> int:
        """The 1-based number of this chat request."""
        with self.chats_lock:
            self.chats += 1
            return self.chats

    def cached_tokens(self, prompt: str) -> int:
        """Tokens of `prompt` shared with an earlier prompt, in whole blocks (like a cache)."""
        with self.seen_lock:
            best = 0
            for earlier in self.seen_prompts:
                best = max(best, _common_prefix_len(earlier, prompt))
            self.seen_prompts.append(prompt)
            del self.seen_prompts[:-64]
        tokens = best // 4
        return tokens - tokens % BLOCK_SIZE

    def metrics_text(self) -> str:
        labels = f'engine="0",model_name="{self.args.served_model_name}"'
        blocks = self.kv_tokens // BLOCK_SIZE
        lines = [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{BLOCK_SIZE}",cache_dtype="auto",'
            f'enable_prefix_caching="True",engine="0",'
            f'kv_cache_size_tokens="{self.kv_tokens}",num_gpu_blocks="{blocks}",'
            f'num_gpu_blocks_override="None"}} 1.0',
        ]
        with self.counters.lock:
            values = dict(self.counters.values)
        for name, value in values.items():
            if name.startswith("vllm:spec_decode") and not self.spec:
                continue
            lines.append(f"# TYPE {name.removesuffix('_total')} counter")
            lines.append(f"{name}{{{labels}}} {float(value)}")
        if self.spec:
            accepted = values["vllm:spec_decode_num_accepted_tokens_total"]
            name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            lines.append(f'{name}{{{labels},position="0"}} {float(accepted)}')
        lines.append("# TYPE vllm:num_requests_running gauge")
        lines.append(f"vllm:num_requests_running{{{labels}}} 0.0")
        lines.append("# TYPE vllm:num_requests_waiting gauge")
        lines.append(f"vllm:num_requests_waiting{{{labels}}} 0.0")
        return "\n".join(lines) + "\n"


def _starts() -> int:
    """Servers started before this one (`FAKE_VLLM_DRIFT_FILE`), counting this one in."""
    path = os.environ.get("FAKE_VLLM_DRIFT_FILE")
    if not path:
        return 0
    try:
        with open(path, encoding="utf-8") as f:
            before = int(f.read().strip() or "0")
    except FileNotFoundError:
        before = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(str(before + 1))
    return before


def _common_prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
