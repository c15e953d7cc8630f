"""The failures the fake vLLM server (`tuner.testing.fake_vllm`) plays, in vLLM's own words.

At start: the Mamba-block refusal of a hybrid model with CUDA graphs (`mamba_failure`). Under
load (issue 24), after N chat requests answered normally (`failure_mode`): the engine core dies
and later requests answer HTTP 500, generation hangs while /health still answers, or a CUDA
error ends the process with status 0; `engine_dies` writes the engine's traceback to the log
once. Only the standard library is imported.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = [
    "CUDA_ERROR",
    "MAMBA_MESSAGE",
    "after",
    "engine_dies",
    "failure_mode",
    "mamba_failure",
]

MAMBA_MESSAGE = (
    "max_num_seqs ({requested}) exceeds available Mamba cache blocks ({available}). Each "
    "decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. "
    "Please lower max_num_seqs to at most {available} or increase gpu_memory_utilization."
)


def after(name: str) -> int | None:
    """The N of a `FAKE_VLLM_..._AFTER=N` variable (None: not set)."""
    value = os.environ.get(name)
    return int(value) if value else None


# vLLM's own line prefixes (process, level, date, logger), which tuner.server.crashes strips.
_CORE = "(EngineCore_DP0 pid=1) ERROR 12-01 00:00:00 [core.py:1332] "
_API = "(APIServer pid=1) ERROR 12-01 00:00:00 [async_llm.py:704] "
_ENGINE_TRACEBACK = (
    f"{_CORE}EngineCore encountered a fatal error.\n"
    f"{_CORE}Traceback (most recent call last):\n"
    f'{_CORE}  File "vllm/v1/engine/core.py", line 1323, in run_engine_core\n'
    f"{_CORE}    engine_core.run_busy_loop()\n"
    f"{_CORE}{{error}}\n"
    f"{_API}vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause.\n"
)
CUDA_ERROR = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
_said = threading.Event()  # the engine's traceback is printed once


def engine_dies(error: str) -> None:
    if not _said.is_set():
        _said.set()
        sys.stderr.write(_ENGINE_TRACEBACK.format(error=error))
        sys.stderr.flush()


def failure_mode(n: int) -> str | None:
    """What the `n`th chat request meets: "500", "hang", "cuda-exit0", or None (an answer)."""
    for name, mode in (
        ("FAKE_VLLM_500_AFTER", "500"),
        ("FAKE_VLLM_HANG_AFTER", "hang"),
        ("FAKE_VLLM_CUDA_EXIT0_AFTER", "cuda-exit0"),
    ):
        limit = after(name)
        if limit is not None and n > limit:
            return mode
    return None


def mamba_failure(requested: int, available: int) -> str:
    """What vLLM writes when `max_num_seqs` exceeds the Mamba cache blocks, then exits 1."""
    message = MAMBA_MESSAGE.format(requested=requested, available=available)
    return (
        "ERROR [core.py] EngineCore failed to start.\n"
        "Traceback (most recent call last):\n"
        '  File "vllm/config/compilation.py", line 1518, in '
        "adjust_cudagraph_sizes_for_mamba\n"
        f"ValueError: {message}\n"
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': 1}"
    )
