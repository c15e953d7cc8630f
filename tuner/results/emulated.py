"""The exported command for the card a study emulated (`gpu.emulate_memory_gib` in the preset).

A study that emulates a smaller card searches gpu_memory_utilization as a fraction of that card
and launches each server with the measuring card's equivalent fraction
(`tuner.study.space.GpuPart.real_utilization`). The export is for the smaller card's user, so
its `--gpu-memory-utilization` is the searched value, the trial's parameter. Without emulation
the searched and the launched value are the same and nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.results.rows import TrialRow

__all__ = ["FLAG", "for_the_emulated_card"]

FLAG = "--gpu-memory-utilization"


def _fraction(value: float) -> str:
    # 0.9 -> "0.90", 0.875 -> "0.875": at least two decimals, as users write this flag.
    text = f"{value:.4f}".rstrip("0")
    return text if len(text.split(".")[1]) >= 2 else f"{value:.2f}"


def for_the_emulated_card(trial: TrialRow, argv: Sequence[str]) -> tuple[list[str], str | None]:
    """`argv` with the searched gpu_memory_utilization, and a note when it differs.

    Returns the argv unchanged and None when the trial searched no utilization, or launched
    the value it searched (no emulation).
    """
    out = list(argv)
    searched = trial.params.get("gpu_memory_utilization")
    if searched is None or FLAG not in out:
        return out, None
    at = out.index(FLAG) + 1
    if at >= len(out):
        return out, None
    try:
        launched = float(out[at])
    except ValueError:
        return out, None
    if abs(float(searched) - launched) < 1e-9:
        return out, None
    out[at] = _fraction(float(searched))
    note = (
        f"{FLAG} {out[at]} is of the emulated card the study searched (gpu.emulate_memory_gib); "
        f"the measuring card ran {launched:g} of its own memory for the same budget "
        "(trial attribute gpu_emulation)"
    )
    return out, note
