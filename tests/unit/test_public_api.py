"""The public surface of `tuner` is exactly `__all__`, sorted, and every name resolves."""

from __future__ import annotations

import subprocess
import sys

import tuner


def test_all_is_sorted_and_resolves() -> None:
    assert tuner.__all__ == sorted(tuner.__all__)
    for name in tuner.__all__:
        assert getattr(tuner, name) is not None, name


def test_public_surface_is_exactly_all() -> None:
    assert set(dir(tuner)) == {*tuner.__all__, "__version__"}
    assert {
        "optimize",
        "load_preset",
        "ServerSpec",
        "Launcher",
        "WorkloadSettings",
        "run_workload",
        "Store",
        "load_results",
        "explain",
        "TunerError",
    } <= set(tuner.__all__)


def test_import_tuner_is_light() -> None:
    # `tuner --help` and reports must not pay for Ray or vLLM at import time.
    code = (
        "import sys, tuner\n"
        "print(any(m.split('.')[0] in ('ray', 'vllm', 'torch') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
