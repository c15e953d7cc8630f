"""What the real-vLLM benchmarks share: a preset's trial request, and the heavy lock.

`record_grid.py`, `knob_ab.py`, `repeatability.py` and `probe_check.py` each evaluate configs of
a preset one fresh server at a time through `tuner.study.trial.evaluate.evaluate`, the function
a study's worker runs; `request_for` builds the request as the driver does (the preset's server
spec and workload, the model as tokenizer when it is a directory), and `locked` takes the
machine's heavy lock around one server run so other users of the box interleave.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.study.space import Preset
    from tuner.study.trial.evaluate import ThroughputPlan, TrialRequest

__all__ = ["locked", "request_for"]


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


def request_for(
    preset: Preset,
    params: dict[str, Any],
    *,
    model_path: str,
    cache_dir: str | Path,
    study: str,
    number: int,
    throughput: ThroughputPlan | None = None,
) -> TrialRequest:
    """The request a study's driver would send for `params` (no plain benchmark by default)."""
    from tuner.study.trial.evaluate import ThroughputPlan, TrialRequest

    return TrialRequest(
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
