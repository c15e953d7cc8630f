"""benchmarks/_evaluate.py `fresh_start`: the one fresh-server run every real-vLLM benchmark
makes, here with a named stand-in for `evaluate` (no vLLM): the request it builds, the progress
and lock it keeps; and the interleaved rounds the A/B entry points run through it
(`interleaved`, `fresh_rounds`)."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

import pytest

from benchmarks._evaluate import fresh_rounds, fresh_start, interleaved
from tuner.study.space import load_preset
from tuner.study.trial import evaluate as evaluate_module
from tuner.workload import RunProgress

PRESET = load_preset(model="smollm2-135m", gpu="cpu")


def _lock_is_held(path: Path) -> bool:
    with path.open("a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(other, fcntl.LOCK_UN)
        return False


def test_a_run_builds_the_drivers_request_under_the_lock_and_keeps_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "heavy.lock"
    seen: dict[str, Any] = {}

    def stand_in(request: Any, on_progress: Any = None) -> str:
        seen["request"], seen["locked"] = request, _lock_is_held(lock)
        on_progress(RunProgress(3, 12, 2, 40.1234, 270.0))
        return "the result"

    monkeypatch.setattr(evaluate_module, "evaluate", stand_in)
    params = PRESET.baseline_params()
    run = fresh_start(
        PRESET, params, model_path="m", cache_dir=tmp_path, study="s", number=7, lock=lock
    )
    assert run.result == "the result"
    assert seen["locked"] and not _lock_is_held(lock)
    request = seen["request"]
    assert (request.study_name, request.trial_number, request.params) == ("s", 7, params)
    assert request.throughput.streams == ()  # no plain benchmark unless asked
    assert run.progress == [[3, 2, 40.123]]
    assert len(run.load_1min) == 2 and run.recorded_at.endswith("Z")


def test_interleaved_rounds_run_in_order_and_alternate_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert interleaved(["A", "B"], 2) == [(0, "A"), (0, "B"), (1, "A"), (1, "B")]
    order = interleaved(["C", "B", "A"], 2, alternate=True)
    assert [n for _, n in order] == ["C", "B", "A", "A", "B", "C"]
    seen: list[tuple[int, dict[str, Any]]] = []

    def stand_in(request: Any, on_progress: Any = None) -> int:
        seen.append((request.trial_number, request.params))
        return request.trial_number

    monkeypatch.setattr(evaluate_module, "evaluate", stand_in)
    base = PRESET.baseline_params()
    configs = {"A": base, "B": {**base, "max_num_seqs": 2}}
    runs = fresh_rounds(
        PRESET, configs, interleaved(list(configs), 2), model_path="m", cache_dir=tmp_path,
        study="s", lock=None,
    )  # fmt: skip
    got = [(rnd, name, run.result) for rnd, name, run in runs]
    assert got == [(0, "A", 0), (0, "B", 1), (1, "A", 2), (1, "B", 3)]
    assert [p for _, p in seen] == [base, configs["B"], base, configs["B"]]
