"""Failure classes from real vLLM log excerpts (CPU build 0.32.0 here, GPU texts from source)."""

from __future__ import annotations

import pytest

from tuner.server import FailureKind, classify

# Seen on this machine: `--kv-cache-memory-bytes 20000000` with SmolLM2 (8k context).
CONTEXT_TOO_LONG_LOG = """\
(EngineCore pid=12235) ERROR 11-29 09:34:54 [core.py:1510]     _check_enough_kv_cache_memory(
(EngineCore pid=12235) ERROR 11-29 09:34:54 [core.py:1510]     raise ValueError(
(EngineCore pid=12235) ERROR 11-29 09:34:54 [core.py:1510] ValueError: To serve at least one \
request with the model's max seq len (8192), (0.18 GiB KV cache is needed, which is larger than \
the available KV cache memory (0.02 GiB). Based on the available memory, the estimated maximum \
model length is 640. Try increasing `gpu_memory_utilization` (which also controls CPU memory on \
the CPU backend) or decreasing `max_model_len` when initializing the engine. See \
https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.
(EngineCore pid=12235) ERROR 11-29 09:34:57 [multiproc_executor.py:315] Worker proc VllmWorker-0 \
died unexpectedly (exit code: None), shutting down executor.
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

# Seen on this machine: an ngram config with prompt_lookup_min > prompt_lookup_max.
LOOKUP_LOG = """\
  File "/work/main/.venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 2099, in \
create_speculative_config
    return SpeculativeConfig(**self.speculative_config)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
  Value error, prompt_lookup_min=5 must be <= prompt_lookup_max=2 [type=value_error, \
input_value=ArgsKwargs((), {'method':...very_timeout_sec=120))}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""

# Seen on this machine: an unknown key in --speculative-config.
UNKNOWN_KEY_LOG = """\
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
bogus_key
  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=1, input_type=int]
    For further information visit https://errors.pydantic.dev/2.14/v/unexpected_keyword_argument
(APIServer pid=1) INFO 11-29 09:35:20 [launcher.py:1] shutting down
"""

ENGINE_FAILED = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {'EngineCore_DP0': 1}\n"
)


def _error_log(message: str) -> str:
    return (
        "(EngineCore_DP0 pid=7) ERROR 11-29 10:00:00 [core.py:1] EngineCore failed to start.\n"
        "Traceback (most recent call last):\n"
        f"(EngineCore_DP0 pid=7) ERROR 11-29 10:00:00 [core.py:1] ValueError: {message}\n"
        + ENGINE_FAILED
    )


def test_context_too_long_carries_vllms_numbers() -> None:
    failure = classify(CONTEXT_TOO_LONG_LOG, 1, False, log_path="/logs/a.log")
    assert failure.kind is FailureKind.CONTEXT_TOO_LONG
    assert failure.details == {
        "max_model_len": 8192,
        "needed_gib": 0.18,
        "available_gib": 0.02,
        "estimated_max_model_len": 640,
    }
    assert failure.infeasible
    assert failure.log_path == "/logs/a.log"
    assert "estimated maximum model length is 640" in failure.excerpt
    assert failure.summary().startswith("vLLM server did not start (context_too_long): To serve")


def test_context_too_long_without_an_estimate_still_classifies() -> None:
    text = (
        "To serve at least one request with the model's max seq len (32,768), (4.00 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (0.00 GiB). Try "
        "increasing `gpu_memory_utilization`"
    )
    failure = classify(_error_log(text), 1, False)
    assert failure.kind is FailureKind.CONTEXT_TOO_LONG
    assert failure.details["max_model_len"] == 32768
    assert "estimated_max_model_len" not in failure.details


@pytest.mark.parametrize(
    ("log", "needle"),
    [
        (LOOKUP_LOG, "Value error, prompt_lookup_min=5 must be <= prompt_lookup_max=2"),
        (UNKNOWN_KEY_LOG, "bogus_key: Unexpected keyword argument"),
    ],
)
def test_rejected_speculative_config_keeps_vllms_message(log: str, needle: str) -> None:
    failure = classify(log, 1, False)
    assert failure.kind is FailureKind.INVALID_SPECULATIVE_CONFIG
    assert failure.message == f"1 validation error for SpeculativeConfig: {needle}"
    assert "[type=" not in failure.message
    assert "SpeculativeConfig" in failure.excerpt
    assert "shutting down" not in failure.excerpt
    assert failure.infeasible


def test_speculative_value_error_raised_while_building_the_config() -> None:
    log = _error_log("num_speculative_tokens:3 must be divisible by n_predict=2")
    failure = classify(log, 1, False)
    assert failure.kind is FailureKind.INVALID_SPECULATIVE_CONFIG
    assert failure.message == "num_speculative_tokens:3 must be divisible by n_predict=2"


def test_mamba_blocks_exceeded_is_retryable_with_the_available_count() -> None:
    log = _error_log(
        "max_num_seqs (512) exceeds available Mamba cache blocks (501). Each decode sequence "
        "requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
        "max_num_seqs to at most 501 or increase gpu_memory_utilization."
    )
    failure = classify(log, 1, False)
    assert failure.kind is FailureKind.MAMBA_BLOCKS_EXCEEDED
    assert failure.details == {"requested": 512, "available": 501}
    assert not failure.infeasible  # lowering max_num_seqs to 501 makes it start


@pytest.mark.parametrize(
    ("message", "kind", "details"),
    [
        (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            FailureKind.NO_CACHE_MEMORY,
            {},
        ),
        (
            "Failed to load model - not enough GPU memory. Try lowering "
            "--gpu-memory-utilization to free memory for weights (original error: CUDA out of "
            "memory)",
            FailureKind.WEIGHTS_OOM,
            {},
        ),
        (
            "CUDA out of memory occurred when warming up sampler with 1,024 dummy requests. "
            "Please try lowering `max_num_seqs`",
            FailureKind.SAMPLER_OOM,
            {"num_reqs": 1024},
        ),
        (
            "Free memory on device cuda:0 (20.1/23.5 GiB) on startup is less than desired GPU "
            "memory utilization (0.92, 21.62 GiB). Decrease GPU memory utilization or reduce "
            "GPU memory used by other processes.",
            FailureKind.INSUFFICIENT_FREE_MEMORY,
            {
                "free_gib": 20.1,
                "total_gib": 23.5,
                "gpu_memory_utilization": 0.92,
                "requested_gib": 21.62,
            },
        ),
        (
            "Available memory on node 0 (1.5/12.96 GiB) on kv cache allocation is less than "
            "requested memory for kv (4.0/11.66 GiB). Reduce CPU memory used by other processes.",
            FailureKind.INSUFFICIENT_FREE_MEMORY,
            {"free_gib": 1.5, "total_gib": 12.96, "requested_kv_gib": 4.0, "requested_gib": 11.66},
        ),
        (
            # With --kv-cache-memory-bytes (the CPU presets' knob) vLLM names one size.
            "Available memory on node 0 (21.93/23.47 GiB) on kv cache allocation is less than "
            "requested memory for kv (93.13 GiB). Decrease --kv-cache-memory-bytes, "
            "VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.",
            FailureKind.INSUFFICIENT_FREE_MEMORY,
            {"free_gib": 21.93, "total_gib": 23.47, "requested_kv_gib": 93.13},
        ),
    ],
)
def test_memory_failures(message: str, kind: FailureKind, details: dict[str, float]) -> None:
    failure = classify(_error_log(message), 1, False)
    assert failure.kind is kind
    assert failure.details == details
    assert failure.infeasible
    assert failure.message.startswith(message.split(" (")[0][:30])


def test_timeout_keeps_the_log_tail() -> None:
    log = "\n".join(f"line {i}" for i in range(100))
    failure = classify(log, None, True)
    assert failure.kind is FailureKind.STARTUP_TIMEOUT
    assert not failure.infeasible
    assert failure.excerpt.splitlines() == [f"line {i}" for i in range(60, 100)]


def test_unknown_failure_is_a_crash_with_the_last_error_and_40_lines() -> None:
    log = "\n".join(f"noise {i}" for i in range(50))
    log += "\nTraceback (most recent call last):\nKeyError: 'rope_scaling'\n" + ENGINE_FAILED
    failure = classify(log, 1, False)
    assert failure.kind is FailureKind.CRASHED
    assert failure.message == "exited with status 1: KeyError: 'rope_scaling'"
    assert failure.details == {"exit_code": 1}
    assert len(failure.excerpt.splitlines()) == 40
    assert failure.excerpt.splitlines()[-1].startswith("RuntimeError: Engine core")


def test_record_carries_the_failure_for_storage() -> None:
    failure = classify(CONTEXT_TOO_LONG_LOG, 1, False, log_path="/logs/b.log").with_context(
        argv=("vllm", "serve", "m"), env={"A": "1"}, started_at=10.0, ended_at=12.5
    )
    record = failure.record(attempt=2)
    assert record.failure_kind == "context_too_long"
    assert record.failure_details["estimated_max_model_len"] == 640
    assert record.exit_status == 1
    assert record.attempt == 2
    assert record.argv == ("vllm", "serve", "m")
    assert record.env == {"A": "1"}
    assert (record.started_at, record.ended_at) == (10.0, 12.5)
    assert record.log_path == "/logs/b.log"


def test_no_cache_memory_carries_vllms_kv_budget() -> None:
    # vLLM 0.26.0's two lines (vllm/v1/worker/gpu_worker.py's info line, then the ValueError of
    # vllm/v1/core/kv_cache_utils.py), with the -10.34 GiB the issue 25 run logged at
    # --max-num-seqs 512 on the 27B-shaped hybrid.
    log = (
        "(EngineCore pid=4242) INFO 12-01 03:58:01 [gpu_worker.py:561] Available KV cache "
        "memory: -10.34 GiB\n"
        "(EngineCore pid=4242) ERROR 12-01 03:58:01 [core.py:1020] ValueError: No available "
        "memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine (this flag also controls CPU memory reservation on the CPU "
        "backend, despite its name). See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\n"
    )
    failure = classify(log, 1, False)
    assert failure.kind is FailureKind.NO_CACHE_MEMORY
    assert failure.infeasible
    assert failure.details == {"available_kv_gib": -10.34}
    assert failure.message.endswith("(vLLM: available KV cache memory -10.34 GiB)")
    assert "Available KV cache memory: -10.34 GiB" in failure.excerpt
