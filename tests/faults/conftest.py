"""Fault-injection helpers: a private cache per test, the vLLM groups a run started, phases.

Each test gets its own `TUNER_CACHE_DIR` (logs and pid files apart from everyone else's) with
the shared test models linked in, so a check like "no server group is left" sees only this
test's servers. Phases of a trial are read from the server's own access log, which records the
workload's requests in order: the launcher's `/metrics` read at ready, the warm-up, a
`/metrics` scrape, the scored tasks, a `/metrics` scrape, then the correctness probe and the
plain benchmark.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr
from tuner.server.reaper import group_members, port_free
from tuner.study.space import preset_dir
from tuner.workload.correctness_probe import PROBE_PROMPTS


@dataclass(frozen=True)
class Box:
    """A test's private cache and the environment a `tuner` subprocess runs in."""

    cache: Path
    env: dict[str, str]

    @property
    def state_dir(self) -> Path:
        return self.cache / "run"

    def servers(self) -> list[dict[str, int]]:
        """The pid files of server groups started from this box."""
        out = []
        for p in self.state_dir.glob("server-*.json"):
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, ValueError):  # being written or removed
                continue
        return out

    def logs(self) -> list[Path]:
        return sorted(self.cache.glob("logs/**/vllm-*.log"), key=lambda p: p.stat().st_mtime)


@pytest.fixture
def box(tmp_path: Path, cache_dir: Path, smollm2_path: Path) -> Box:
    """A private cache with the shared models linked in (SmolLM2 built if needed)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(cache_dir / "models", target_is_directory=True)
    # vLLM's compile cache too (tuner.server.compile_cache): a private one would make every
    # fault test's first start compile from nothing.
    (cache_dir / "vllm").mkdir(exist_ok=True)
    (cache / "vllm").symlink_to(cache_dir / "vllm", target_is_directory=True)
    # And what the installed vLLM accepts (tuner.server.capabilities, keyed by the install):
    # asked afresh, it costs each test's first `tuner optimize` about 40 s on 2 cores.
    (cache_dir / "vllm-capabilities").mkdir(exist_ok=True)
    (cache / "vllm-capabilities").symlink_to(
        cache_dir / "vllm-capabilities", target_is_directory=True
    )
    env = {**os.environ, "TUNER_CACHE_DIR": str(cache), "COLUMNS": "200"}
    env.pop("TUNER_TEST_SIGKILL_AT", None)
    return Box(cache, env)


def short_space(
    tmp_path: Path, *, preset: str = "smollm2-135m", warmup: bool = True, **changes: object
) -> Path:
    """The CPU preset cut to what a fault needs: 2 scored tasks of 3 steps, a short plain
    benchmark, eager servers, and a warm-up of 1 task and one shape sweep (none at all with
    `warmup=False`, for a test that injects nothing in the warm-up).

    What these tests check (a killed process's group gone, a trial failed or re-queued once,
    nothing stored twice) does not depend on the tasks' length, the sweeps or torch.compile,
    and each costs every server of the suite: `--enforce-eager` skips the CPU build's compile
    at each start (ready in about 37 s instead of 62 s on a Zen 4; tests/e2e/conftest.py), and
    one sweep instead of up to three still meets every batch shape once.
    """
    data = yaml.safe_load((preset_dir() / preset / "cpu.yaml").read_text())
    workload = data["workload"]
    workload.update(tasks=2, warmup_tasks=1 if warmup else 0, warmup_max_sweeps=1)
    workload["shape"].update(steps_min=3, steps_max=3, steps_median=3.0)
    data["model"]["server_args"] = [*data["model"].get("server_args", []), "--enforce-eager"]
    # The file's methods only, whether or not arctic-inference (method suffix) is installed.
    data["space"].pop("methods_if_available", None)
    data["throughput_streams"] = [1]
    data["throughput_requests"] = 4
    for key, value in changes.items():
        data[key] = value
    path = tmp_path / f"{preset}-short.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def optimize_argv(
    space: Path, url: str, study: str, n_trials: int, *extra: str, confirm: str = "0"
) -> list[str]:
    """`tuner optimize` on `space`, without calibration: the short workload needs no sizing, and
    the study's first server then goes straight to its trial (the calibration probe's phase is
    interrupted in tests/integration/test_interrupt_fake.py)."""
    return [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage", url,
        "--study", study, "--n-trials", str(n_trials), "--confirm", confirm, "--no-calibrate",
        *extra,
    ]  # fmt: skip


def nth_server(box: Box, alive: Callable[[], None], n: int, phase: str) -> dict[str, int]:
    """The n-th server group this box started (1-based), once its log shows `phase`;
    `alive()` asserts the driver still runs."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        alive()
        logs = box.logs()
        if len(logs) >= n and phase_of(logs[n - 1]) == phase:
            groups = [g for g in box.servers() if Path(str(g.get("log_path"))) == logs[n - 1]]
            if groups:
                return groups[0]
        time.sleep(0.2)
    raise AssertionError(f"server {n} did not reach {phase}")


def confirmation_runs(trials: list[FrozenTrial]) -> list[tuple[int, int]]:
    """(config's trial, round) of every COMPLETE confirmation run, sorted."""
    return sorted(
        (int(t.user_attrs[TrialAttr.CONFIRM_OF]), int(t.user_attrs[TrialAttr.CONFIRM_ROUND]))
        for t in trials
        if t.state == TrialState.COMPLETE and t.user_attrs.get(TrialAttr.ROLE) == Role.CONFIRM
    )


def requests_in(log: Path) -> list[str]:
    """The access log's requests, in order ("GET /metrics", "POST /v1/chat/completions")."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        for method in ("GET", "POST"):
            mark = f'"{method} /'
            if mark in line:
                path = line.split(mark, 1)[1].split(" ", 1)[0]
                out.append(f"{method} /{path}")
    return out


def phase_of(log: Path) -> str:
    """Where the trial served by `log` is: starting, warmup, scored, probe, benchmark."""
    reqs = requests_in(log)
    metrics = [i for i, r in enumerate(reqs) if r == "GET /metrics"]
    if not metrics:
        return "starting"
    posts_after = [
        sum(1 for r in reqs[m:] if r.startswith("POST")) for m in metrics
    ]  # POSTs after each /metrics read
    if len(metrics) == 1:
        return "warmup" if posts_after[0] else "ready"
    if len(metrics) == 2:
        return "scored" if posts_after[1] else "warmup-done"
    return "benchmark" if posts_after[2] > PROBE_PROMPTS else "probe"


def wait_gone(groups: list[dict[str, int]], timeout_s: float) -> float:
    """Seconds until no process of `groups` is alive and their ports are free (or timeout)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        alive = [g for g in groups if group_members(g["pgid"], since_ticks=g.get("start_ticks"))]
        bound = [g for g in groups if not port_free("127.0.0.1", g["port"])]
        if not alive and not bound:
            return time.monotonic() - start
        time.sleep(0.1)
    return float("inf")
