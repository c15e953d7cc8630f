"""SIGKILL the driver at random moments (and between storing a result and telling Optuna).

Real vLLM CPU servers, SmolLM2, a SQLite file, and a short workload (2 replayed tasks, no
warm-up, no plain benchmark) so that each case costs about three server starts. After the
kill, the same command again must end with exactly the asked number of trials that started a
server: none lost, none measured twice, no server process or port left behind.

Marked `kill` as well as `vllm`: 292 s ("stored") and 228 s ("random-1") measured on 2 cores,
so about 13 minutes for the three cases.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.e2e.conftest import tuner_env
from tuner.attrs import TrialAttr
from tuner.server.reaper import port_free
from tuner.storage import Store
from tuner.study.search.roles import counts_toward_budget
from tuner.study.space import preset_dir

pytestmark = [pytest.mark.vllm, pytest.mark.kill]

N_TRIALS = 2


def _space(tmp_path: Path) -> Path:
    data = yaml.safe_load((preset_dir() / "smollm2-135m" / "cpu.yaml").read_text())
    data["workload"].update(tasks=2, warmup_tasks=0)
    data["throughput_streams"] = []
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _argv(space: Path, url: str) -> list[str]:
    return [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage", url,
        "--study", "kill", "--n-trials", str(N_TRIALS), "--confirm", "0",
    ]  # fmt: skip


def _servers(state_dir: Path) -> list[dict[str, int]]:
    out = []
    for p in state_dir.glob("server-*.json"):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):  # being written or removed
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("case", ["stored", "random-1", "random-2"])
def test_a_killed_driver_resumes_to_the_asked_trials(
    case: str, tmp_path: Path, cache_dir: Path, smollm2_path: Path
) -> None:
    space = _space(tmp_path)
    url = f"sqlite:///{tmp_path / 'kill.db'}"
    state_dir = cache_dir / "run"
    env = tuner_env(cache_dir)
    seen: dict[int, dict[str, int]] = {}
    if case == "stored":
        # Dies right after the first result's rows are stored, before Optuna hears of it.
        env["TUNER_TEST_SIGKILL_AT"] = "stored"
        killed = subprocess.run(_argv(space, url), env=env, capture_output=True, timeout=900)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    else:
        # Anywhere from Ray's start to the middle of the second trial.
        delay = random.Random(case).uniform(5.0, 110.0)
        driver = subprocess.Popen(
            _argv(space, url), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and driver.poll() is None:
            for s in _servers(state_dir):
                seen[s["pid"]] = s
            time.sleep(0.5)
        driver.send_signal(signal.SIGKILL)
        driver.wait()

    proc = subprocess.run(
        _argv(space, url), env=tuner_env(cache_dir), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    for s in seen.values():  # every server the killed driver started is gone, its port free
        assert not _alive(s["pid"]), s
        assert port_free("127.0.0.1", s["port"]), s
    assert not _servers(state_dir)

    study = optuna.load_study(study_name="kill", storage=url)
    trials = study.get_trials()
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    measured = [t for t in trials if counts_toward_budget(t)]
    assert len(measured) == N_TRIALS, [(t.number, t.state, t.user_attrs) for t in trials]
    assert measured[0].user_attrs[TrialAttr.ROLE] == "baseline"
    keys = Counter(tuple(sorted(t.params.items())) for t in measured)
    assert max(keys.values()) == 1, keys  # nothing measured twice
    store = Store(url)
    try:
        assert sorted(store.trial_numbers("kill")) == sorted(t.number for t in measured)
        assert len(store.workload_runs("kill")) == N_TRIALS
    finally:
        store.close()
    if case == "stored":
        interrupted = [t for t in trials if t.state == TrialState.FAIL]
        assert [t.user_attrs.get(TrialAttr.FAILURE_KIND) for t in interrupted] == ["interrupted"]
