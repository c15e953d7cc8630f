"""`tuner optimize` with its output going to a file: one plain line per event, and an ETA.

A real `tuner optimize` process (its own local Ray, a SQLite file) whose trials start the fake
vLLM (`tuner.testing.fake_vllm`, a named fake: the point is the driver's output, and a real CPU
server takes minutes a trial). Its stdout and stderr go to a file, as under nohup or CI.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
import yaml
from optuna_dashboard._note import get_note_from_system_attrs

from tests.integration.conftest import fake_preset
from tests.integration.interrupts import Lines as _Lines
from tuner.server.reaper import port_free

pytestmark = pytest.mark.ray

PRESET = fake_preset(
    {"FAKE_VLLM_STARTUP_S": "1.0", "FAKE_VLLM_TOKEN_DELAY_S": "0.01"},
    tasks=4,
    tool_latency_s=0.0,
    gpu={"name": "cpu", "cpu": True},
    space={"methods": ["none", "ngram"], "max_num_seqs": [4, 8]},
    throughput_streams=[1],
    throughput_requests=2,
    throughput_output_tokens=8,
)


def test_optimize_to_a_file_prints_a_line_per_trial_and_an_eta(tmp_path: Path) -> None:
    space = tmp_path / "fake.yaml"
    space.write_text(yaml.safe_dump(PRESET))
    env = {
        **os.environ,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "TUNER_CACHE_DIR": str(tmp_path / "cache"),
        # A home of its own: the local Ray's token must not be left in it (Ray 2.5x writes
        # ~/.ray/auth_token for a new local instance unless told where the token is).
        "HOME": str(tmp_path / "home"),
    }
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    (tmp_path / "home").mkdir()
    log = tmp_path / "optimize.log"
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage",
        f"sqlite:///{tmp_path / 'study.db'}", "--n-trials", "2", "--confirm", "1,1",
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert not (tmp_path / "home" / ".ray").exists(), list((tmp_path / "home").rglob("*"))
    lines = text.splitlines()
    stamped = [line for line in lines if re.match(r"\[\d+:\d\d:\d\d\] ", line)]
    # The estimate from the preset comes before anything ran, and says it is one.
    assert stamped[0].split("] ", 1)[1].startswith("workload: replay (load shape"), text
    assert stamped[1].split("] ", 1)[1].startswith("estimate: "), text
    assert "4 server runs (2 trials + up to 2 confirmation runs)" in stamped[1]
    assert "an estimate from the preset" in stamped[1]
    # Every trial: started with its config, server ready with its KV tokens, then its outcome.
    for n in range(4):
        started = [
            i for i, line in enumerate(stamped) if f"] trial {n} " in line and "started: " in line
        ]
        ready = [i for i, line in enumerate(stamped) if f"] trial {n} server ready: " in line]
        done = [
            i
            for i, line in enumerate(stamped)
            if re.search(rf"\] trial {n} .*(scored|pruned|infeasible|failed)", line)
        ]
        assert len(started) == len(ready) == len(done) == 1, (n, text)
        assert started[0] < ready[0] < done[0], text
        assert "KV cache tokens, started in " in stamped[ready[0]]
    assert "trial 0 (baseline) started: none" in text
    # Replay scores are completed tasks/h, with their interval.
    assert re.search(
        r"trial 0 \(baseline\) scored: [\d,]+ completed tasks/h \[[\d,]+, [\d,]+\]", text
    )
    assert "successful tasks/h" not in "\n".join(stamped)
    assert "(confirmation of #0, round 1) started" in text
    assert "floor start done (the baseline's second start" in text
    assert "confirmation round 1 of 1 done" in text
    # A measured ETA after each run, counting the confirmation runs still to come.
    etas = [line for line in stamped if "] ETA: " in line]
    assert len(etas) == 4, text
    assert "3 server runs to go" in etas[0] and "measured over 1 server run" in etas[0]
    assert "no server run left" in etas[-1]
    # The end of the command writes the answer into the dashboard: the note and the plots.
    assert "dashboard: the recommendation is study fake-cpu's note, with 5 plots" in text
    study = optuna.load_study(study_name="fake-cpu", storage=f"sqlite:///{tmp_path / 'study.db'}")
    attrs = study._storage.get_study_system_attrs(study._study_id)
    body = get_note_from_system_attrs(attrs, None)["body"]
    assert "### What to deploy: trial #" in body and "vllm serve" in body
    assert len(optuna.artifacts.get_all_artifact_meta(study)) == 5


# The heartbeat interval under test (TUNER_PROGRESS_INTERVAL_S; 60 s by default), and what a gap
# between two lines may exceed it by: the driver looks at its workers every 0.5 s, and this box
# is shared.
INTERVAL_S = 2.0
SLACK_S = 2.0


def _run_env(tmp_path: Path, preset: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    space = tmp_path / "fake.yaml"
    space.write_text(yaml.safe_dump(preset))
    env = {
        **os.environ,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "TUNER_CACHE_DIR": str(tmp_path / "cache"),
        "TUNER_PROGRESS_INTERVAL_S": str(INTERVAL_S),
    }
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage",
        f"sqlite:///{tmp_path / 'study.db'}", "--n-trials", "1", "--confirm", "0",
    ]  # fmt: skip
    return argv, env


@pytest.mark.extended  # out of CI since 2026-12-07: CI's minutes on a Zen 3 (docs/ci.md)
def test_a_logged_run_never_goes_an_interval_without_a_line(tmp_path: Path) -> None:
    # A server that takes 4 intervals to start and a workload that takes several: the lines
    # that fill them say what the server is doing (its log's phase) and how the tasks go.
    preset = fake_preset(
        {"FAKE_VLLM_STARTUP_S": str(4 * INTERVAL_S), "FAKE_VLLM_TOKEN_DELAY_S": "0.06"},
        tasks=4,
        tool_latency_s=0.0,
        gpu={"name": "cpu", "cpu": True},
        throughput_streams=[1],
        throughput_requests=2,
        throughput_output_tokens=8,
    )
    argv, env = _run_env(tmp_path, preset)
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    out = _Lines(proc)
    assert proc.wait(timeout=300) == 0, out.text()
    out.join()
    started = out.wait_for(r"\] trial 0 \(baseline\) started: ", 1)
    scored = out.wait_for(r"\] trial 0 \(baseline\) scored: ", 1)
    window = [(at, line) for at, line in out.lines if started <= at <= scored]
    # Long enough to need lines in between (the server alone takes 4 intervals).
    assert scored - started > 6 * INTERVAL_S, out.text()
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(window)]
    assert max(gaps) <= INTERVAL_S + SLACK_S, (gaps, out.text())
    text = out.text()
    # While the server starts: its seconds so far and the phase its log names.
    assert re.search(r"\] trial 0 server starting: \d+ s, vLLM says: loading weights", text), text
    assert re.search(
        r"\] trial 0 server starting: \d+ s, vLLM says: warm-up: compiling for the batch shapes",
        text,
    ), text
    # While it scores: tasks done of the total, the agents, the token rates so far.
    assert re.search(
        r"\] trial 0 scoring: \d+ s, [0-3] of 4 tasks done, 2 agents, [\d,]+ prompt tok/s and "
        r"[\d,]+ gen tok/s so far",
        text,
    ), text
    # No tqdm bar and no Ray notice anywhere in the output.
    assert "Token authentication" not in text and "it/s]" not in text, text


def _interruptible(tmp_path: Path, token_delay_s: float) -> tuple[subprocess.Popen[str], _Lines]:
    """A `tuner optimize` in its own session (as a terminal runs it) whose trial 0 runs its
    workload slowly: each model call takes seconds, so the next task boundary is far away."""
    preset = fake_preset(
        {"FAKE_VLLM_STARTUP_S": "1.0", "FAKE_VLLM_TOKEN_DELAY_S": str(token_delay_s)},
        tasks=4,
        tool_latency_s=0.0,
        gpu={"name": "cpu", "cpu": True},
        throughput_streams=[1],
        throughput_requests=2,
        throughput_output_tokens=8,
    )
    argv, env = _run_env(tmp_path, preset)
    out = _Lines.start(argv, env)
    proc = out.proc
    out.wait_for(r"\] trial 0 server ready: ", 240)
    time.sleep(1.0)  # its agents are in their first model calls
    return proc, out


def _tree(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _fake_servers(tree: list[psutil.Process]) -> list[psutil.Process]:
    """The fake vLLM's processes (its supervisor's command line names it too)."""
    found = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            if "tuner.testing.fake_vllm" in " ".join(p.cmdline()):
                found.append(p)
    return found


def _port(server: psutil.Process) -> int:
    argv = server.cmdline()
    return int(argv[argv.index("--port") + 1])


def _left(tree: list[psutil.Process], grace_s: float = 10.0) -> list[str]:
    """The processes of `tree` still alive `grace_s` after the driver exited (a process that
    was told to stop may take a moment to die; one that outlives the grace was left behind)."""
    with contextlib.suppress(psutil.Error):
        psutil.wait_procs(tree, timeout=grace_s)
    alive = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
    return alive


def test_ctrl_c_says_what_stops_exits_130_and_leaves_no_process(tmp_path: Path) -> None:
    proc, out = _interruptible(tmp_path, 0.1)
    try:
        tree = _tree(proc.pid)
        servers = _fake_servers(tree)
        assert servers, [p.cmdline() for p in tree]
        port = _port(servers[0])
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        code = proc.wait(timeout=120)
        # Before the clean-up below kills the process group: what the driver itself left.
        left = _left(tree)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    out.join()
    text = out.text()
    assert code == 130, text
    said = [line for _, line in out.lines if "interrupted" in line]
    assert len(said) == 1, text
    space = tmp_path / "fake.yaml"
    assert said[0] == (
        "interrupted: trial 0 (baseline) (none seqs 8) stops and goes back to the queue; "
        f"resume with: tuner optimize --space {space} --storage sqlite:///{tmp_path / 'study.db'}"
        " --n-trials 1 --confirm 0 (Ctrl-C again quits at once)"
    ), text
    assert not left, left
    assert port_free("127.0.0.1", port)
    # It is re-queued: the interrupted run failed, a copy of it waits.
    study = optuna.load_study(study_name="fake-cpu", storage=f"sqlite:///{tmp_path / 'study.db'}")
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING], states


def test_a_second_ctrl_c_quits_at_once_and_leaves_no_process(tmp_path: Path) -> None:
    proc, out = _interruptible(tmp_path, 1.0)
    try:
        tree = _tree(proc.pid)
        port = _port(_fake_servers(tree)[0])
        os.killpg(proc.pid, signal.SIGINT)
        out.wait_for(r"^interrupted: ", 30)
        # The first one waits for the trial's next task boundary (seconds away); not this one.
        os.killpg(proc.pid, signal.SIGINT)
        second = time.monotonic()
        code = proc.wait(timeout=60)
        took = time.monotonic() - second
        # Before the clean-up below kills the process group: what the driver itself left.
        left = _left(tree)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    out.join()
    assert code == 130, out.text()
    assert took < 8, (took, out.text())
    assert not left, left
    assert port_free("127.0.0.1", port)


def test_a_budget_study_says_its_plan_and_ends_with_its_verdict_inside_the_budget(
    tmp_path: Path,
) -> None:
    # The recorded run makes the first plan's estimate the fake's (a few seconds a run), as a
    # GPU preset's recorded runs make a real model's; the measured runs revise it.
    preset = {
        **PRESET,
        "recorded_run": {
            "startup_s": 1.0,
            "agent_s_per_task": 1.0,
            "after_s": 1.0,
            "source": "the fake server",
        },
    }
    argv, env = _run_env(tmp_path, preset)
    argv = [a for a in argv if a not in ("--n-trials", "1", "--confirm", "0")]
    budget_s = 75.0
    start = time.monotonic()
    proc = subprocess.run(
        [*argv, "--budget", "1m15s"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    wall = time.monotonic() - start
    text = proc.stdout
    assert proc.returncode == 0, text
    # The interpreter's start comes before the command's clock: a few seconds of slack.
    assert wall <= budget_s + 5, (wall, text)
    stamped = [line.split("] ", 1)[1] for line in text.splitlines() if re.match(r"\[\d", line)]
    plan = stamped[0]
    assert plan.startswith("plan: budget 1m15s: about "), text
    assert " server runs of about " in plan and "(the fake server)" in plan, plan
    assert "up to " in plan and " trial" in plan and "revised on each run's measured" in plan
    # The estimate counts the plan's runs; the plan is revised on the first measured run.
    assert stamped[2].startswith("estimate: "), text
    assert any(line.startswith("plan revised on 1 measured run") for line in stamped), text
    # A verdict: the export reads the study that the budget ended.
    export = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "export",
            "--storage",
            argv[argv.index("--storage") + 1],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert export.returncode == 0, export.stdout + export.stderr
    assert "vllm serve" in export.stdout
