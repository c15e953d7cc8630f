"""`tuner sweep`'s orchestration with stand-in servers (`tuner.testing.fake_vllm`, a named fake).

What a real server adds is in test_sweep_vllm.py (one real start); here, in seconds: a fresh
server per config, `--limit` and resume, the finalists from the study, a given schedule on its
own server with the schedule in its command, and the CLI's table and sentences. The sweep's
servers go through the trials' path (a Ray worker calling `evaluate()`), so it gets what a
trial gets: the Mamba clamp-and-retry of a start, and an interrupt that stops the server
within seconds with nothing of the config stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import create_trial
from typer.testing import CliRunner

from tests.integration.conftest import fake_preset
from tests.integration.interrupts import STOPPED_WITHIN_S, Lines, interrupt, server_of
from tuner.cli import app
from tuner.results.load_sweep import SWEEP_ATTR, LoadSweep
from tuner.storage import Store, normalize_url
from tuner.study.space import Preset
from tuner.study.stages.load_sweep import SWEEP_TABLE_SUFFIX, SweepOptions, run_sweep

PRESET = fake_preset(
    {"FAKE_VLLM_STARTUP_S": "0.2", "FAKE_VLLM_TOKEN_DELAY_S": "0.002"},
    tasks=3,
    warmup_tasks=1,
    tool_latency_s=0.0,
    gpu={"name": "cpu", "cpu": True},
)
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "max_num_seqs": 8}

pytestmark = pytest.mark.ray  # each run_sweep that starts a server starts a local Ray


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_VLLM_COMMAND", f"{sys.executable} -m tuner.testing.fake_vllm")
    monkeypatch.setenv("FAKE_VLLM_SPEC_SPEEDUP", "4")


def _study(url: str, data: dict[str, Any] = PRESET, *, baseline_only: bool = False) -> None:
    preset = Preset.model_validate(data)
    study = optuna.create_study(study_name="f", storage=normalize_url(url), direction="maximize")
    study.set_user_attr("preset", preset.model_dump(mode="json"))
    dists = {
        "method": CategoricalDistribution(["none", "ngram"]),
        "num_speculative_tokens": IntDistribution(1, 4),
        "max_num_seqs": CategoricalDistribution([8]),
    }
    trials = (
        ({"method": "none", "max_num_seqs": 8}, 100.0, "baseline"),
        (NGRAM, 120.0, "candidate"),
        ({"method": "ngram", "num_speculative_tokens": 1, "max_num_seqs": 8}, 90.0, "candidate"),
    )
    for params, value, role in trials[:1] if baseline_only else trials:
        study.add_trial(
            create_trial(
                params=params,
                distributions={k: dists[k] for k in params},
                value=value,
                user_attrs={"role": role},
            )
        )


def _starts(url: str, index: int) -> int:
    store = Store(url)
    try:
        return len(store.server_starts("f" + SWEEP_TABLE_SUFFIX, index))
    finally:
        store.close()


@pytest.mark.extended  # out of CI since 2026-12-07: CI's minutes on a Zen 3 (docs/ci.md)
def test_limit_resume_and_a_given_schedule(
    sqlite_url: str, tmp_path: Path, fake_vllm: None
) -> None:
    _study(sqlite_url)
    options = SweepOptions(
        storage_url=sqlite_url, cache_dir=tmp_path, study_name="f", agents=(1, 2), top=1, limit=1
    )
    first = run_sweep(options)
    assert [c.key for c in first.configs] == ["#0"]  # the limit: one config per call
    second = run_sweep(options)
    assert [c.key for c in second.configs] == ["#0", "#1"]  # the best candidate, not #2
    assert second.configs[0] == first.configs[0]  # kept, not measured again
    assert [_starts(sqlite_url, i) for i in (0, 1)] == [1, 1]
    ngram = second.configs[1]
    assert [p.agents for p in ngram.points] == [1, 2]
    assert "--speculative-config" in ngram.serve_command

    given = SweepOptions(
        storage_url=sqlite_url,
        cache_dir=tmp_path,
        study_name="f",
        agents=(1, 2),
        top=1,
        schedule_given=((1, 1, 2), (2, 8, 0)),
    )
    third = run_sweep(given)
    schedule = third.configs[2]
    assert (schedule.key, schedule.trial_number, schedule.schedule) == (
        "schedule",
        1,
        given.schedule_given,
    )
    config = json.loads(schedule.serve_command.split("--speculative-config ")[1].strip("'"))
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 1, 2], [2, 8, 0]]
    assert config["num_speculative_tokens"] == 2
    assert _starts(sqlite_url, 2) == 1

    stored = optuna.load_study(study_name="f", storage=normalize_url(sqlite_url)).user_attrs
    assert LoadSweep.from_json(stored[SWEEP_ATTR]) == third

    result = CliRunner().invoke(
        app,
        [
            "sweep",
            "--study",
            "f",
            "--agents",
            "1,2",
            "--top",
            "1",
            "--storage",
            sqlite_url,
            "--cache-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Load sweep (replay, 3 tasks per load)" in result.output
    assert "for 2 agents, export" in result.output
    assert (tmp_path / "out" / "load-sweep.png").read_bytes().startswith(b"\x89PNG")
    assert _starts(sqlite_url, 0) == 1  # the CLI found every config measured


def test_a_mamba_start_failure_is_clamped_and_retried_as_in_a_trial(
    sqlite_url: str, tmp_path: Path, fake_vllm: None
) -> None:
    # The fake refuses max_num_seqs 8 with vLLM's "exceeds available Mamba cache blocks (4)"
    # error: evaluate() starts the server again at 4, and the sweep measures that server.
    data = fake_preset(
        {"FAKE_VLLM_STARTUP_S": "0.2", "FAKE_VLLM_MAMBA_BLOCKS": "4"},
        tasks=2,
        tool_latency_s=0.0,
        gpu={"name": "cpu", "cpu": True},
    )
    _study(sqlite_url, data, baseline_only=True)
    options = SweepOptions(
        storage_url=sqlite_url, cache_dir=tmp_path, study_name="f", agents=(1, 2), top=1
    )
    (base,) = run_sweep(options).configs
    assert base.failure is None, base.failure
    assert [p.agents for p in base.points] == [1, 2]
    assert "--max-num-seqs 4" in base.serve_command  # what ran, not the params' 8
    assert base.params["max_num_seqs"] == 8
    store = Store(sqlite_url)
    try:
        starts = store.server_starts("f" + SWEEP_TABLE_SUFFIX, 0)
        runs = store.workload_runs("f" + SWEEP_TABLE_SUFFIX, 0)
    finally:
        store.close()
    assert [s.record.failure_kind for s in starts] == ["mamba_blocks_exceeded", None]
    assert sorted(r.record.agents for r in runs) == [1, 2]


def test_ctrl_c_stops_the_sweeps_server_within_seconds_and_stores_nothing(
    tmp_path: Path,
) -> None:
    # Each model call takes seconds (2 s an output word): the signal lands in the first load.
    data = fake_preset(
        {"FAKE_VLLM_STARTUP_S": "0.2", "FAKE_VLLM_TOKEN_DELAY_S": "2"},
        tasks=4,
        tool_latency_s=0.0,
        gpu={"name": "cpu", "cpu": True},
    )
    url = f"sqlite:///{tmp_path / 'study.db'}"
    _study(url, data, baseline_only=True)
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "HOME": str(tmp_path / "home"),  # Ray's token file stays out of the real home
    }
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    (tmp_path / "home").mkdir()
    argv = [
        sys.executable, "-m", "tuner.cli", "sweep", "--study", "f", "--agents", "1,2",
        "--storage", url, "--cache-dir", str(cache),
    ]  # fmt: skip
    out = Lines.start(argv, env)
    try:
        out.wait_for(r"#0 .*: 1 agent\(s\)", 240)
        stopped = interrupt(out.proc, out, server_of(cache / "run"), signal.SIGINT, group=False)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(out.proc.pid, signal.SIGKILL)
    out.join()
    text = out.text()
    assert stopped.code == 130, (stopped.code, text)
    assert stopped.took_s < STOPPED_WITHIN_S, (stopped.took_s, text)
    assert not stopped.left, stopped.left
    assert "interrupted; run the same tuner sweep again to resume" in text, text
    # Nothing of the interrupted config is stored: the next sweep measures it whole.
    attrs = optuna.load_study(study_name="f", storage=normalize_url(url)).user_attrs
    assert SWEEP_ATTR not in attrs
    store = Store(url)
    try:
        assert not store.workload_runs("f" + SWEEP_TABLE_SUFFIX, 0)
    finally:
        store.close()
