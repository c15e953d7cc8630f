"""A real CPU study (vLLM CPU build, SmolLM2, SQLite, replay), run once per test session.

Several end-to-end tests read the same study: running it costs six real server starts (three
trials, the floor start, one confirmation round), in two runs of the command, so that the
second run's "adds new trials, repeats none" is checked without a start of its own.

The studies run the CPU preset (search_spaces/smollm2-135m/cpu.yaml) with the per-run extras
that these tests do not check cut (`short_space`): no warm-up (tasks and shape sweeps, about
50 s a run on a Zen 4 and far more on a CPU without AVX-512, whose prefill is about 10x
slower), a two-request plain benchmark, and `--enforce-eager` (no torch.compile at each start:
ready in about 37 s instead of 62 s on a Zen 4, and the same tasks/h within noise, x1.021;
benchmarks/data/cpu-settings-smollm2-135m-cpu.json). The space, the other server flags and
the environment, the calibration and every stage are the preset's; the scored window it
calibrates to is 30 s (`short_space`).
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
import yaml

from tuner.study.search.roles import counts_toward_budget
from tuner.study.space import preset_dir

N_TRIALS = 3  # budget trials of the session study: 2 in the first run, 1 in the second
FIRST_RUN_TRIALS = 2
# Scored tasks per trial in the end-to-end studies: what these tests check (storage, resume,
# confirmation, screening, the reports) does not depend on the count, and every task costs each
# server run of the suite a few seconds (docs/ci.md has the minutes); measurements are the
# benchmarks' job (benchmarks/). The studies run without screening (`cpu_study`).
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


def short_space(directory: Path) -> Path:
    """The CPU preset without warm-up, with a two-request plain benchmark and eager
    execution, as a file."""
    data = yaml.safe_load((preset_dir() / "smollm2-135m" / "cpu.yaml").read_text())
    data["workload"]["warmup_tasks"] = 0  # also skips the shape sweeps (tuner.workload.warmup)
    # The file's methods only, whether or not arctic-inference is installed: what these tests
    # check must not depend on it (suffix's real study: tests/e2e/test_suffix_real.py).
    data["space"].pop("methods_if_available", None)
    data["throughput_streams"] = [1]
    data["throughput_requests"] = 2
    # The preset's `dtype: by-cpu` stays: fp32 on a CPU without bf16 instructions, as a user's
    # study runs there (tuner.study.preflight.dtype).
    data["model"]["server_args"] = ["--enforce-eager"]
    # A 30 s scored window instead of the CPU preset's 120 s: on a box whose calibration says
    # the 4 tasks take longer, the study scales their contexts down (and says so), as a user's
    # study does at 120 s on a slower one; on a Zen 4 the 4 tasks fit either way.
    data["target_window_s"] = 30
    # Three steps a task (the fewest a shape allows) instead of three to six: what these tests
    # check does not depend on the steps, and each costs a Zen 3 about 10 s of decode (docs/ci.md).
    data["workload"]["shape"].update({"steps_min": 3, "steps_max": 3, "steps_median": 3.0})
    path = directory / "smollm2-135m-cpu-short.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="session")
def e2e_space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's preset file (`short_space`)."""
    return short_space(tmp_path_factory.mktemp("e2e-space"))


def tuner_env(cache_dir: Path) -> dict[str, str]:
    """The environment the CLI runs in: the shared test cache, no terminal."""
    return {**os.environ, "TUNER_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}


def run_optimize(
    space: Path, storage_url: str, study: str, cache_dir: Path, n_trials: int, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`tuner optimize` on the CPU preset (`short_space`), as a user runs it."""
    argv = [
        sys.executable,
        "-m",
        "tuner.cli",
        "optimize",
        "--space",
        str(space),
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
    tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, smollm2_path: Path, e2e_space: Path
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
    # --no-screening: every candidate runs its 4 tasks, so the study's later stages (the floor
    # start, confirmation, explain's control of trial 1) run whichever config this CPU serves
    # faster. With screening on, a Zen 3 pruned both n-gram candidates at their first rung, and
    # explain and the confirmation stage had no finished candidate to work on. Screening itself
    # is checked against the fake server (tests/integration/test_study_fake.py).
    flags = ("--seed", "7", "--full-space", "--no-screening")
    # First run: the baseline and one candidate, no confirmation rounds (`--confirm 0` still
    # runs the floor start, the baseline's second start). Second run of the same study: one
    # more trial, then one confirmation round of the best candidate against that floor.
    first = run_optimize(
        e2e_space, url, "cpu-e2e", cache_dir, FIRST_RUN_TRIALS, *flags, "--confirm", "0"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    study = optuna.load_study(study_name="cpu-e2e", storage=url)
    before = tuple(
        (t.number, t.value, dict(t.params)) for t in study.trials if counts_toward_budget(t)
    )
    second = run_optimize(
        e2e_space,
        url,
        "cpu-e2e",
        cache_dir,
        N_TRIALS - FIRST_RUN_TRIALS,
        *flags,
        "--confirm",
        "1,1",
    )
    assert second.returncode == 0, second.stdout + second.stderr
    yield CpuStudy(url, "cpu-e2e", cache_dir, first.stdout + second.stdout, before)
