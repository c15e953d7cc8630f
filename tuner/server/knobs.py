"""vLLM knobs beyond the static speculative config: depth schedules and suffix decoding.

- A depth schedule is vLLM's `num_speculative_tokens_per_batch_size` (vLLM PR #32374): a list
  of (first batch size, last batch size, depth) entries; depth 0 turns speculation off for
  those batch sizes. `check_depth_schedule` applies vLLM's own rules
  (`vllm/v1/spec_decode/dynamic/utils.py`), which vLLM otherwise checks only when the
  scheduler starts, a minute into a server start.
- Suffix decoding (method "suffix") needs the `arctic-inference` package in vLLM's Python;
  `suffix_decoding_available` looks for it there without importing it.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from tuner.errors import ConfigError

__all__ = ["DepthSchedule", "check_depth_schedule", "suffix_decoding_available"]

DepthSchedule = tuple[tuple[int, int, int], ...]


def check_depth_schedule(schedule: DepthSchedule, max_depth: int | None = None) -> DepthSchedule:
    """A depth schedule sorted by batch size, checked by vLLM's rules; ValueError otherwise.

    vLLM (`vllm/v1/spec_decode/dynamic/utils.py`) wants 3-item entries, positive ranges with
    start <= end, depths >= 0, ranges that do not overlap, and a first range starting at 1. It
    silently caps a depth above `num_speculative_tokens`; here that is an error (`max_depth`),
    so the schedule a user reads is the one that runs.
    """
    if not schedule:
        raise ValueError("num_speculative_tokens_per_batch_size must not be empty")
    for entry in schedule:
        if len(entry) != 3:
            raise ValueError(
                "each num_speculative_tokens_per_batch_size entry is "
                f"(range_start, range_end, num_speculative_tokens); got {list(entry)}"
            )
        start, end, depth = entry
        if start <= 0 or end <= 0:
            raise ValueError(f"batch-size range ({start}, {end}) must be positive")
        if start > end:
            raise ValueError(f"batch-size range start must be <= end in {list(entry)}")
        if depth < 0:
            raise ValueError(f"schedule depths must be >= 0 (got {depth})")
        if max_depth is not None and depth > max_depth:
            raise ValueError(
                f"schedule depth {depth} exceeds num_speculative_tokens={max_depth}; vLLM "
                "would cap it, so raise num_speculative_tokens or lower the depth"
            )
    ordered: DepthSchedule = tuple(
        sorted(((int(e[0]), int(e[1]), int(e[2])) for e in schedule), key=lambda e: e[0])
    )
    previous_end = 0
    for start, end, _ in ordered:
        if start <= previous_end:
            raise ValueError("batch-size ranges must not overlap")
        previous_end = end
    if ordered[0][0] != 1:
        raise ValueError("the first batch-size range must start at 1")
    return ordered


def _has_suffix_module() -> bool:
    """`arctic_inference.suffix_decoding` is present, found without importing the package
    (its plugin versions import vLLM)."""
    import importlib.util

    found = importlib.util.find_spec("arctic_inference")
    if found is None:
        return False
    return any(
        (Path(p) / "suffix_decoding").exists() or (Path(p) / "suffix_decoding.py").exists()
        for p in found.submodule_search_locations or ()
    )


# The same look, in another Python (that of vLLM, which may not have tuner).
_SUFFIX_LOOK = """
import importlib.util, pathlib, sys
found = importlib.util.find_spec("arctic_inference")
paths = [pathlib.Path(p) for p in (found.submodule_search_locations or [])] if found else []
ok = any((p / "suffix_decoding").exists() or (p / "suffix_decoding.py").exists() for p in paths)
sys.exit(0 if ok else 1)
"""


@functools.lru_cache(maxsize=4)
def _suffix_in(python: str) -> bool:
    # Compared unresolved: two venvs share one interpreter binary but not their packages.
    if Path(python).absolute() == Path(sys.executable).absolute():
        return _has_suffix_module()
    try:
        done = subprocess.run(
            [python, "-c", _SUFFIX_LOOK], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def suffix_decoding_available() -> bool:
    """Whether the vLLM that tuner launches can run suffix decoding.

    vLLM imports `arctic_inference.suffix_decoding` for method "suffix" and rejects the config
    without it ("Arctic Inference is required for suffix decoding"). The check looks in the
    Python that `TUNER_VLLM_COMMAND` runs (`tuner.server.capabilities.find_python`).
    """
    from tuner.settings import get_settings

    try:
        from tuner.server.capabilities import find_python

        python = find_python(get_settings().launch_command()) or sys.executable
    except (ImportError, ConfigError):
        python = sys.executable
    return _suffix_in(python)
