"""Startup facts from vLLM's log lines (CPU build as seen here, GPU formats from source)."""

from __future__ import annotations

from tuner.records import StartupFacts
from tuner.server import merge_facts, parse_cache_info, parse_log, parse_metric_labels
from tuner.server.facts import HybridCache, parse_hybrid_cache

# Lines of a real SmolLM2 start on this machine (vLLM 0.32.0 CPU, --kv-cache-memory-bytes 1e9).
CPU_LOG = """\
(APIServer pid=14130) INFO 11-29 09:36:36 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  \
version 0.32.0
(EngineCore pid=14181) INFO 11-29 09:36:43 [core.py:133] Initializing a V1 LLM engine (v0.32.0) \
with config: model='/root/.cache/tuner-test/models/smollm2-135m', speculative_config=None
(Worker pid=14282) INFO 11-29 09:36:51 [default_loader.py:501] Loading weights took 0.80 seconds
(Worker pid=14282) INFO 11-29 09:37:30 [cpu_worker.py:260] Explicitly set (0.93/12.96) GiB for \
KV cache on node 0.
(EngineCore pid=14181) INFO 11-29 09:37:30 [kv_cache_utils.py:2327] CPU KV cache size: 43,392 \
tokens, Maximum concurrency for 8,192 tokens per request: 5.30x
(EngineCore pid=14181) INFO 11-29 09:37:32 [core.py:402] init engine (profile, create kv cache, \
warmup model) took 39.54 s
(APIServer pid=14130) INFO 11-29 09:37:34 [entry.py:140] Starting vLLM server on http://127.0.0.1:35357
"""

# The GPU build's lines, formatted as vLLM 0.32's logger calls format them.
GPU_LOG = """\
INFO [gpu_model_runner.py:5150] Model loading took 15.26 GiB memory and 41.512345 seconds
INFO [gpu_worker.py:760] Available KV cache memory: 4.42 GiB
INFO [kv_cache_utils.py:2327] GPU KV cache size: 36,253 tokens, Maximum concurrency for \
16,384 tokens per request: 2.21x
INFO [gpu_model_runner.py:6582] Graph capturing finished in 12 secs, took 0.55 GiB
INFO [core.py:402] init engine (profile, create kv cache, warmup model) took 63.10 s \
(compilation: 20.01 s)
"""

METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",\
engine="0",kv_cache_size_tokens="43392",num_gpu_blocks="339",num_gpu_blocks_override="None",\
prefix_caching_hash_algo="sha256"} 1.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2"} 0.0
"""


def test_cpu_log_facts() -> None:
    facts = parse_log(CPU_LOG)
    assert facts == StartupFacts(
        kv_cache_tokens=43392,
        max_concurrency=5.30,
        model_load_seconds=0.80,
        available_kv_gib=0.93,
        engine_init_seconds=39.54,
        vllm_version="0.32.0",
    )


def test_gpu_log_facts() -> None:
    facts = parse_log(GPU_LOG)
    assert facts.kv_cache_tokens == 36253
    assert facts.max_concurrency == 2.21
    assert facts.model_load_gib == 15.26
    assert facts.model_load_seconds == 41.512345
    assert facts.available_kv_gib == 4.42
    assert facts.graph_capture_seconds == 12
    assert facts.graph_capture_gib == 0.55
    assert facts.engine_init_seconds == 63.10
    assert facts.vllm_version is None


def test_partial_log_leaves_unknown_facts_none() -> None:
    facts = parse_log("Loading weights took 1.25 seconds\n")
    assert facts == StartupFacts(model_load_seconds=1.25)


def test_cache_config_info_labels() -> None:
    labels = parse_metric_labels(METRICS)
    assert labels["num_gpu_blocks"] == "339"
    assert labels["enable_prefix_caching"] == "True"
    assert parse_cache_info(METRICS) == StartupFacts(
        kv_cache_tokens=43392, num_gpu_blocks=339, block_size=128
    )
    assert parse_metric_labels(METRICS, "vllm:num_requests_running") == {
        "engine": "0",
        "model_name": "smollm2",
    }
    assert parse_cache_info("") == StartupFacts()


def test_merge_prefers_metrics_and_adds_the_measured_startup_time() -> None:
    from_metrics = StartupFacts(kv_cache_tokens=43000, num_gpu_blocks=339, block_size=128)
    merged = merge_facts(parse_log(CPU_LOG), from_metrics, startup_seconds=58.2)
    assert merged.kv_cache_tokens == 43000
    assert merged.num_gpu_blocks == 339
    assert merged.max_concurrency == 5.30
    assert merged.engine_init_seconds == 39.54
    assert merged.startup_seconds == 58.2


# A hybrid's start with prefix caching on, in the format of vLLM's own lines (the mode line
# from vllm/model_executor/models/config.py as installed here; the block line from the H200 run
# of issue 35, where 0.26.0 chose align and a 400-token block).
HYBRID_LOG = """\
(APIServer pid=1) INFO 12-02 10:00:01 [config.py:688] Mamba cache mode is set to 'align' for \
Qwen3_5ForConditionalGeneration by default when prefix caching is enabled
(APIServer pid=1) INFO 12-02 10:00:01 [config.py:512] Setting attention block size to 400 tokens \
to ensure that attention page size is >= mamba page size.
"""


def test_hybrid_cache_mode_and_attention_block_from_the_log() -> None:
    assert parse_hybrid_cache(HYBRID_LOG) == HybridCache("align", 400)
    # A mode given on the command line shows only among the non-default args.
    given = "INFO non-default args: {'mamba_cache_mode': 'all', 'enable_prefix_caching': True}"
    assert parse_hybrid_cache(given) == HybridCache("all", None)
    assert parse_hybrid_cache(CPU_LOG) == HybridCache()
