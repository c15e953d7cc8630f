"""What a started server became: startup facts read from its log and from /metrics.

vLLM logs its KV cache size, concurrency, load and init times once at startup (formats in
docs/vllm-facts.md, numbers with thousands commas, a `GPU`/`CPU` prefix on the KV line; the
CPU build's own lines for KV memory and weight loading) and
publishes `vllm:cache_config_info` on /metrics. `parse_log` reads the first, `parse_cache_info`
the second, and `merge_facts` combines them (the metrics win where both speak: they are what
the engine really allocated).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from tuner.records import StartupFacts

__all__ = [
    "HybridCache",
    "merge_facts",
    "parse_cache_info",
    "parse_hybrid_cache",
    "parse_log",
    "parse_metric_labels",
    "start_parts",
]

_N = r"([\d,]+)"
_F = r"([\d,]*\.?\d+)"
_KV = re.compile(
    rf"(?:[A-Z]+(?: \+ host)? )?KV cache size: {_N} tokens, "
    rf"Maximum concurrency for {_N} tokens per request: {_F}x"
)
_LOAD = re.compile(rf"Model loading took {_F} GiB memory and {_F} seconds")
_AVAILABLE = re.compile(rf"Available KV cache memory: {_F} GiB")
# The CPU build logs neither of the two lines above; it says how much it set aside for the KV
# cache ("Explicitly set" with --kv-cache-memory-bytes, "Auto set" otherwise) and how long
# the weights took to load.
_CPU_KV = re.compile(rf"(?:Explicitly|Auto) set \({_F}/{_F}\) GiB for KV cache")
_WEIGHTS = re.compile(rf"Loading weights took {_F} seconds")
_GRAPHS = re.compile(rf"Graph capturing finished in {_F} secs, took {_F} GiB")
_INIT = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_F} s")
# torch.compile, once per compiled model (MTP's drafter is a second): vllm/compilation/
# monitor.py and decorators.py (0.26-0.32); a graph loaded from vLLM's compile cache says
# "Directly load the compiled graph(s)", one compiled afresh "Compiling a graph for".
_COMPILE = re.compile(
    rf"torch\.compile (?:and initial profiling/warmup run together )?took {_F} s in total"
)
_CACHE_LOAD = re.compile(r"Directly load the compiled graph")
_CACHE_MISS = re.compile(r"Compiling a graph for ")
_PROFILE = (
    re.compile(rf"Initial profiling/warmup run took {_F} s"),
    re.compile(rf"Memory profiling takes {_F} seconds"),
)
_VERSIONS = (
    re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)"),
    re.compile(r"vLLM API server version ([^\s,]+)"),
    re.compile(r"vLLM server version ([^\s,]+)"),
    re.compile(r"\bversion (\d+\.\d+\.\d+[^\s,]*)"),
)
# Hybrid (Mamba / Gated DeltaNet + attention) models, vLLM 0.15 and later: with prefix caching
# on, vLLM picks a mamba_cache_mode and raises the attention block so that one block's page
# holds a Mamba state (docs/vllm-facts.md). A mode given on the command line appears among the
# "non-default args" instead.
_MAMBA_MODE = (
    re.compile(r"Mamba cache mode is set to '(\w+)'"),
    re.compile(r"'mamba_cache_mode': '(\w+)'"),
)
_ATTN_BLOCK = re.compile(r"Setting attention block size to {_N} tokens".replace("{_N}", _N))
_INFO_LINE = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _float(text: str) -> float:
    return float(text.replace(",", ""))


def parse_log(text: str) -> StartupFacts:
    """Startup facts from a server log; fields not found stay None.

    Args:
        text: The server's log (stdout and stderr together), complete or partial.

    Returns:
        KV cache tokens and concurrency, model load GiB and seconds, available KV cache GiB,
        graph capture seconds and GiB, engine init seconds, the vLLM version, and the start's
        compile seconds, compile-cache hit and first profiling run.
    """
    facts = StartupFacts()
    if found := _KV.search(text):
        facts = replace(facts, kv_cache_tokens=_int(found[1]), max_concurrency=_float(found[3]))
    if found := _LOAD.search(text):
        facts = replace(facts, model_load_gib=_float(found[1]), model_load_seconds=_float(found[2]))
    elif found := _WEIGHTS.search(text):
        facts = replace(facts, model_load_seconds=_float(found[1]))
    if found := _AVAILABLE.search(text) or _CPU_KV.search(text):
        facts = replace(facts, available_kv_gib=_float(found[1]))
    if found := _GRAPHS.search(text):
        facts = replace(
            facts, graph_capture_seconds=_float(found[1]), graph_capture_gib=_float(found[2])
        )
    if found := _INIT.search(text):
        facts = replace(facts, engine_init_seconds=_float(found[1]))
    for pattern in _VERSIONS:
        if found := pattern.search(text):
            facts = replace(facts, vllm_version=found[1])
            break
    return _start_parts(text, facts)


def start_parts(facts: StartupFacts) -> dict[str, float | str]:
    """The start's parts a person compares between starts, by name (only those known).

    load_s (weights), compile_s (torch.compile, all compiled models), compile_cache ("hit":
    every graph came from vLLM's compile cache), profile_s (the first profiling run), graphs_s
    (CUDA graph capture), engine_init_s (profiling, KV cache, warm-up and capture together).
    """
    parts: dict[str, float | str] = {}
    for name, value in (
        ("load_s", facts.model_load_seconds),
        ("compile_s", facts.compile_seconds),
        ("profile_s", facts.profile_seconds),
        ("graphs_s", facts.graph_capture_seconds),
        ("engine_init_s", facts.engine_init_seconds),
    ):
        if value is not None:
            parts[name] = round(value, 2)
    if facts.compile_cache_hit is not None:
        parts["compile_cache"] = "hit" if facts.compile_cache_hit else "miss"
    return parts


def _start_parts(text: str, facts: StartupFacts) -> StartupFacts:
    compiles = [_float(m[1]) for m in _COMPILE.finditer(text)]
    if compiles:
        facts = replace(facts, compile_seconds=round(sum(compiles), 2))
    loaded, compiled = _CACHE_LOAD.search(text), _CACHE_MISS.search(text)
    if loaded or compiled:
        facts = replace(facts, compile_cache_hit=compiled is None)
    for pattern in _PROFILE:
        runs = [_float(m[1]) for m in pattern.finditer(text)]  # MTP's drafter has its own
        if runs:
            facts = replace(facts, profile_seconds=round(sum(runs), 2))
            break
    return facts


@dataclass(frozen=True)
class HybridCache:
    """How a hybrid model's cache was laid out: vLLM's mamba_cache_mode and attention block."""

    mamba_cache_mode: str | None = None
    attention_block_size: int | None = None


def parse_hybrid_cache(text: str) -> HybridCache:
    """The mamba cache mode and attention block size a hybrid server logged (None: not said).

    The last mention wins: vLLM logs the mode it settled on after the defaults were applied.
    """
    mode = None
    for pattern in _MAMBA_MODE:
        found = pattern.findall(text)
        if found:
            mode = found[-1]
            break
    blocks = _ATTN_BLOCK.findall(text)
    return HybridCache(mode, _int(blocks[-1]) if blocks else None)


def parse_metric_labels(metrics_text: str, name: str = "vllm:cache_config_info") -> dict[str, str]:
    """The labels of the first sample of metric `name` in a Prometheus text exposition."""
    pattern = _INFO_LINE if name == "vllm:cache_config_info" else None
    if pattern is None:
        pattern = re.compile(rf"^{re.escape(name)}\{{(?P<labels>[^}}]*)\}}", re.MULTILINE)
    found = pattern.search(metrics_text)
    if found is None:
        return {}
    return dict(_LABEL.findall(found["labels"]))


def _optional_int(value: str | None) -> int | None:
    if value is None or value in ("", "None"):
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def parse_cache_info(metrics_text: str) -> StartupFacts:
    """Facts from `vllm:cache_config_info`: GPU blocks, block size and KV tokens if published."""
    labels = parse_metric_labels(metrics_text)
    return StartupFacts(
        kv_cache_tokens=_optional_int(labels.get("kv_cache_size_tokens")),
        num_gpu_blocks=_optional_int(labels.get("num_gpu_blocks")),
        block_size=_optional_int(labels.get("block_size")),
    )


def merge_facts(
    log: StartupFacts, metrics: StartupFacts, *, startup_seconds: float | None = None
) -> StartupFacts:
    """Combine log and metrics facts: metrics win where both are set; add the measured time."""
    merged = {
        f.name: getattr(metrics, f.name)
        if getattr(metrics, f.name) is not None
        else getattr(log, f.name)
        for f in fields(StartupFacts)
    }
    if startup_seconds is not None:
        merged["startup_seconds"] = startup_seconds
    return StartupFacts(**merged)
