"""`evaluate()`'s Mamba handling with a launcher that fails the way vLLM does (no server runs).

The real failure needs CUDA graphs on a hybrid model; here the launcher raises the classified
failure vLLM's message gives (`tuner.server.failures`), with the numbers in its details.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from tuner.server import FailureKind
from tuner.server.failures import StartupFailed, StartupFailure
from tuner.study.search.recording import measurement_attrs
from tuner.study.space import load_preset
from tuner.study.trial import evaluate as evaluate_module
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
