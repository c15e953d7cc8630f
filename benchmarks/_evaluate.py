"""What the real-vLLM benchmarks share: one fresh-start run of a config, its request, and
interleaved rounds of them.

`record_grid.py` (the grid), `repeatability.py` (A B rounds) and scripts/gpu_lease/suffix_gpu.py
evaluate configs of a preset one fresh server at a time through
`tuner.study.trial.evaluate.evaluate`, the function a study's worker runs, all through
`fresh_start`: it builds the request as the driver does (the preset's server spec and
workload, the model as tokenizer when it is a directory), holds the machine's heavy
lock (`locked`) around the server's life so other users of the box interleave, and keeps what
the figures need beside the result: the 1-minute load average as the run started and ended,
the progress the worker reported (tasks done, successes, seconds), the time it finished and
how long it waited for the lock. `interleaved` is the one round order the A/B entry points use
and `fresh_rounds` runs it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.study.space import Preset
    from tuner.study.trial.request import ThroughputPlan, TrialResult
    from tuner.workload import RunProgress

__all__ = ["FreshRun", "fresh_rounds", "fresh_start", "interleaved", "locked"]


@contextlib.contextmanager
def locked(path: str | Path | None) -> Iterator[None]:
    """Hold flock(2) on `path` for the block (no lock when None)."""
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class FreshRun:
    """One config's run on a fresh server, with the machine's state around it."""

    result: TrialResult
    load_1min: tuple[float, float]  # as the run started and as it ended
    recorded_at: str  # UTC, when it ended
    waited_s: float  # for the heavy lock
    progress: list[list[float]] = field(default_factory=list)  # [tasks, successes, seconds]


def fresh_start(
    preset: Preset,
    params: dict[str, Any],
    *,
    model_path: str,
    cache_dir: str | Path,
    study: str,
    number: int,
    lock: str | Path | None,
    throughput: ThroughputPlan | None = None,
) -> FreshRun:
    """Evaluate `params` once on a fresh server under `lock`, with the request a study's driver
    would send (no plain benchmark unless `throughput` asks for one)."""
    from tuner.study.trial.evaluate import evaluate
    from tuner.study.trial.request import ThroughputPlan, TrialRequest

    progress: list[list[float]] = []

    def on_progress(p: RunProgress) -> None:
        progress.append([p.tasks_done, p.successes, round(p.elapsed_s, 3)])

    waited = time.monotonic()
    with locked(lock):
        waited = time.monotonic() - waited
        before = os.getloadavg()[0]
        request = TrialRequest(
            study_name=study,
            trial_number=number,
            params=params,
            spec=preset.server_spec(params, model_path=model_path),
            workload=preset.workload,
            cache_dir=str(cache_dir),
            startup_timeout_s=preset.startup_timeout_s,
            throughput=throughput if throughput is not None else ThroughputPlan(streams=()),
            tokenizer=model_path if Path(model_path).is_dir() else None,
        )
        result = evaluate(request, on_progress=on_progress)
        after = os.getloadavg()[0]
    return FreshRun(
        result=result,
        load_1min=(round(before, 2), round(after, 2)),
        recorded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        waited_s=waited,
        progress=progress,
    )


def interleaved(
    names: Sequence[str], rounds: int, *, alternate: bool = False
) -> list[tuple[int, str]]:
    """(round, config) in run order: `names` in every round, reversed in odd rounds when
    `alternate` (then each config's mean position is the same, so a linear drift cancels)."""
    out: list[tuple[int, str]] = []
    for r in range(rounds):
        out += [(r, n) for n in (names[::-1] if alternate and r % 2 else names)]
    return out


def fresh_rounds(
    preset: Preset, configs: dict[str, dict[str, Any]], order: list[tuple[int, str]], **run: Any
) -> Iterator[tuple[int, str, FreshRun]]:
    """Each (round, config) of `order` on a fresh server, in order (`run`: `fresh_start`'s
    model_path, cache_dir, study and lock); the caller stops at the first failed run."""
    for number, (rnd, name) in enumerate(order):
        yield rnd, name, fresh_start(preset, configs[name], number=number, **run)
