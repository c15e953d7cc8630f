"""What this CPU can do for vLLM's CPU build: its flags and the dtype that runs fastest on it.

vLLM's CPU build runs bf16 linear layers in oneDNN only where the CPU has bf16 instructions
(avx512_bf16 or amx_bf16); elsewhere it falls back to torch's kernels ("Failed to create
oneDNN linear"). On a Zen 3 without AVX-512, compiled as the presets run, fp32 prefilled 5.6x
and decoded 1.85x faster than bf16 (docs/vllm-facts.md, "bf16 or fp32 on a CPU without bf16
instructions"). Presets with `model.dtype: by-cpu` take `cpu_dtype()`; the tests' servers too.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BF16_FLAGS", "cpu_dtype", "cpu_flags"]

# CPU flags with which vLLM's CPU build runs bf16 linear layers in oneDNN.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The first `flags` line of /proc/cpuinfo (empty where there is none).

    Args:
        cpuinfo: The text of /proc/cpuinfo (read when None; no file: no flags).
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def cpu_dtype(cpuinfo: str | None = None) -> Literal["float32"] | None:
    """ "float32" on a CPU without bf16 instructions (or whose flags are unknown), else None:
    the model's own dtype, which vLLM's CPU build runs in bf16."""
    return None if cpu_flags(cpuinfo) & BF16_FLAGS else "float32"
