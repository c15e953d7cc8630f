"""A real CPU study (vLLM CPU build, SmolLM2, SQLite, replay), run once per test session.

Several end-to-end tests read the same study: running it costs five real server starts (three
trials, two confirmation runs), in two runs of the command, so that the second run's "adds new
trials, repeats none" is checked without a start of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from tuner.study.search.roles import counts_toward_budget

N_TRIALS = 3  # budget trials of the session study: 2 in the first run, 1 in the second
FIRST_RUN_TRIALS = 2
# Scored tasks per trial in the end-to-end studies: what these tests check (storage, resume,
# confirmation, screening, the reports) does not depend on the count, and every task costs each
# server run of the suite a few seconds (docs/ci.md has the minutes); measurements are the
# benchmarks' job (benchmarks/). With 4 the screening rungs fall on tasks 1 and 2.
TASKS = 4


@dataclass(frozen=True)
class CpuStudy:
    """Where the session's real study lives, and what its first run printed."""

    storage_url: str
    study_name: str
    cache_dir: Path
    output: str
    # (number, value, params) of the budget trials after the first run of the command.
    first_run: tuple[tuple[int, float | None, dict[str, object]], ...]


def tuner_env(cache_dir: Path) -> dict[str, str]:
    """The environment the CLI runs in: the shared test cache, no terminal."""
    return {**os.environ, "TUNER_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}


def run_optimize(
    storage_url: str, study: str, cache_dir: Path, n_trials: int, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`tuner optimize` on the CPU preset, as a user runs it."""
    argv = [
        sys.executable,
        "-m",
        "tuner.cli",
        "optimize",
        "--model",
        "smollm2-135m",
        "--gpu",
        "cpu",
        "--storage",
        storage_url,
        "--study",
        study,
        "--n-trials",
        str(n_trials),
        "--tasks",
        str(TASKS),
        *extra,
    ]
    return subprocess.run(
        argv, capture_output=True, text=True, env=tuner_env(cache_dir), timeout=1800
    )


@pytest.fixture(scope="session")
def cpu_study(
    tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, smollm2_path: Path
) -> Iterator[CpuStudy]:
    """Three trials of the CPU preset on a SQLite file (baseline first, then candidates)."""
    db = tmp_path_factory.mktemp("cpu-study") / "study.db"
    url = f"sqlite:///{db}"
    # With seed 7 the first candidate after the baseline is n-gram depth 3 with a 1 GB KV cache
    # (the baseline has 2 GB), which `tuner explain` needs, and the second run's trial is n-gram
    # depth 1 at 1 GB, so no trial of the study is explain's KV-cut control (no speculation at
    # 1 GB) and explain runs it as a trial of its own (seed 0 drew that control as the third
    # trial and explain reused it). The draws are TPE's random start-up draws, seeded from the
    # study seed and the sampled trials present (tuner.study.search.sampling derive_seed), so
    # they do not depend on measured values; propose() over the preset gives them offline.
    # --full-space: the draws above are the preset's full space (the reduced one has no 1 GB
    # KV size); a later run of this study without the flag keeps the full space, since the
    # study searched it (tuner.study.search.driver).
    flags = ("--seed", "7", "--full-space")
    # First run: the baseline and one candidate, no confirmation rounds (`--confirm 0` still
    # runs the floor start, the baseline's second start). Second run of the same study: one
    # more trial, then one confirmation round of the best candidate against that floor.
    first = run_optimize(url, "cpu-e2e", cache_dir, FIRST_RUN_TRIALS, *flags, "--confirm", "0")
    assert first.returncode == 0, first.stdout + first.stderr
    study = optuna.load_study(study_name="cpu-e2e", storage=url)
    before = tuple(
        (t.number, t.value, dict(t.params)) for t in study.trials if counts_toward_budget(t)
    )
    second = run_optimize(
        url, "cpu-e2e", cache_dir, N_TRIALS - FIRST_RUN_TRIALS, *flags, "--confirm", "1,1"
    )
    assert second.returncode == 0, second.stdout + second.stderr
    yield CpuStudy(url, "cpu-e2e", cache_dir, first.stdout + second.stdout, before)
