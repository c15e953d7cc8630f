"""`evaluate()`'s Mamba handling with a launcher that fails the way vLLM does (no server runs),
and a load sweep's loads on one stand-in server.

The real failure needs CUDA graphs on a hybrid model; here the launcher raises the classified
failure vLLM's message gives (`tuner.server.failures`), with the numbers in its details.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from tuner.errors import WorkloadError
from tuner.records import ServerStartRecord
from tuner.server import FailureKind
from tuner.server.failures import StartupFailed, StartupFailure
from tuner.study.search.recording import measurement_attrs
from tuner.study.space import load_preset
from tuner.study.trial import evaluate as evaluate_module
from tuner.study.trial import loads as loads_module
from tuner.study.trial.evaluate import evaluate
from tuner.study.trial.request import TrialRequest


class _MambaLauncher:
    """Every start fails with 'max_num_seqs (N) exceeds available Mamba cache blocks (M)'."""

    available: ClassVar[list[int]] = []
    launched: ClassVar[list[int | None]] = []

    def __init__(self, **_: Any) -> None:
        pass

    def launch(self, spec: Any, *, timeout_s: float, attempt: int, **_kw: Any) -> Any:
        self.launched.append(spec.max_num_seqs)
        blocks = self.available[attempt]
        failure = StartupFailure(
            kind=FailureKind.MAMBA_BLOCKS_EXCEEDED,
            message=f"max_num_seqs ({spec.max_num_seqs}) exceeds available Mamba cache "
            f"blocks ({blocks})",
            details={"requested": spec.max_num_seqs, "available": blocks},
            attempt=attempt,
        )
        raise StartupFailed(failure)


def _request(tmp_path: Path) -> TrialRequest:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    params = preset.baseline_params()
    return TrialRequest(
        study_name="s",
        trial_number=0,
        params=params,
        spec=preset.server_spec(params, model_path="m"),
        workload=preset.workload,
        cache_dir=str(tmp_path),
    )


@pytest.mark.parametrize(
    ("available", "launches"),
    [([0], [8]), ([5, 3], [8, 5])],
    ids=["no block available", "fails again after the clamp"],
)
def test_mamba_failures_that_cannot_be_clamped_are_infeasible(
    available: list[int], launches: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_MambaLauncher, "available", available)
    monkeypatch.setattr(_MambaLauncher, "launched", [])
    monkeypatch.setattr(evaluate_module, "Launcher", _MambaLauncher)
    result = evaluate(_request(tmp_path))
    assert _MambaLauncher.launched == launches
    assert result.infeasible and result.failure_kind == "mamba_blocks_exceeded"
    assert result.workload is None
    attrs = measurement_attrs(result)
    assert attrs["infeasible"] is True
    # The spec recorded is the one the last start asked for.
    assert attrs["server_spec"]["max_num_seqs"] == launches[-1]


class _Handle:
    """A started server that records when it is stopped; it never dies."""

    base_url = "http://127.0.0.1:1"
    facts = SimpleNamespace(block_size=16, kv_cache_tokens=1000)
    stopped = False

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopped = True

    def death(self, _answered: int | None, *, wait_s: float = 5.0) -> None:
        return None

    def record(self) -> ServerStartRecord:
        return ServerStartRecord(argv=("vllm",), env={}, log_path="log")


class _StartingLauncher:
    """Every start succeeds: one `_Handle`, kept for the test to look at."""

    handles: ClassVar[list[_Handle]] = []

    def __init__(self, **_: Any) -> None:
        pass

    def launch(self, _spec: Any, **_kw: Any) -> _Handle:
        self.handles.append(_Handle())
        return self.handles[-1]


def test_a_load_sweeps_loads_run_in_turn_on_one_server_until_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[tuple[int, int, int]] = []

    def workload(_url: str, _model: str, settings: Any, **_kw: Any) -> Any:
        ran.append((settings.agents, settings.seed, settings.warmup_tasks))
        if settings.agents == 4:
            raise WorkloadError("connection reset")
        task = SimpleNamespace(steps=[object()], failure_reason=None)
        return SimpleNamespace(agents=settings.agents, task_records=[task])

    monkeypatch.setattr(_StartingLauncher, "handles", [])
    monkeypatch.setattr(evaluate_module, "Launcher", _StartingLauncher)
    monkeypatch.setattr(loads_module, "run_workload_sync", workload)
    request = _request(tmp_path)
    w = request.workload
    loads = tuple(
        w.model_copy(update={"agents": n, "seed": n, "warmup_tasks": int(n == 1)})
        for n in (1, 2, 4, 8)
    )
    result = evaluate(replace(request, loads=loads))
    (handle,) = _StartingLauncher.handles  # one server for every load
    assert handle.stopped
    assert ran == [(1, 1, 1), (2, 2, 0), (4, 4, 0)]  # in turn; the failure ends the trial
    assert [r.agents for r in result.loads] == [1, 2]
    assert result.failure_kind == "workload_failed" and not result.infeasible
    assert result.failure_reason == "the workload failed against the server: connection reset"
    assert result.workload is None and result.probe is None and result.throughput == ()
    assert len(result.server_starts) == 1
