"""Faults of the vLLM server itself and of the Ray worker that owns it, in a real study.

- The API server SIGKILLed during the scored tasks: that trial fails, saying the server was
  killed and after how many answered requests; the study goes on to its next trial. Then the
  engine core alone SIGKILLed (what the kernel's OOM killer does to the process holding the
  model): that trial fails as a server crash too, and the study goes on.
- A server that dies at its first request (the tiny hybrid model with prefix caching on the
  CPU build): the trial is infeasible, with vLLM's own error line.
- A server with a shorter context than the workload's conversations: the failed tasks say why,
  with both numbers, in `tuner workload run`'s output and in the returned records.

Real vLLM CPU, real Ray, SQLite files; about 7 server starts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.faults.conftest import Box, optimize_argv, phase_of, short_space, wait_gone
from tuner.attrs import TrialAttr
from tuner.server import Launcher, ServerSpec
from tuner.server.reaper import group_members
from tuner.storage import Store
from tuner.workload import WorkloadSettings, run_workload_sync
from tuner.workload.shape import SuiteShape

pytestmark = [pytest.mark.vllm, pytest.mark.faults]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait(box: Box, driver: subprocess.Popen[str], phase: str, trial_servers: int) -> dict:
    """The `trial_servers`-th server group of this run, once it reaches `phase`."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        assert driver.poll() is None, driver.communicate()[1][-3000:]
        logs = box.logs()
        servers = sorted(box.servers(), key=lambda s: s["started_at"])
        if len(logs) >= trial_servers and servers and phase_of(logs[-1]) == phase:
            return servers[-1]
        time.sleep(0.2)
    raise AssertionError(f"no server reached {phase}")


def _trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=url).get_trials()


def _member(group: dict, is_it: Callable[[str], bool]) -> int:
    """The one member of the server group whose command line `is_it` picks."""
    found = [p for p in group_members(group["pgid"]) if is_it(_cmdline(p))]
    assert len(found) == 1, [(p, _cmdline(p)) for p in group_members(group["pgid"])]
    return found[0]


@pytest.mark.injects(2)  # the API server killed in one trial, the engine core in the next
def test_server_or_engine_killed_mid_workload_fails_its_trial_and_the_study_goes_on(
    tmp_path: Path, box: Box
) -> None:
    url = f"sqlite:///{tmp_path / 'serverkill.db'}"
    # With the warm-up: a server killed before it answered any request reads as one that died
    # at its first request (infeasible), not as one killed mid-run after N answered requests.
    argv = optimize_argv(short_space(tmp_path), url, "serverkill", 3)
    driver = subprocess.Popen(
        argv, env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    # The group's leader is tuner's supervisor (and its watcher), whose argv carries the vLLM
    # command too: the API server is the member that runs the module itself.
    group = _wait(box, driver, "scored", 1)
    os.kill(
        _member(group, lambda c: "api_server" in c and "supervisor.py" not in c), signal.SIGKILL
    )
    # The engine core alone, as the kernel's OOM killer picks the process with the most
    # memory: vLLM names it in its process title (VLLM::EngineCore).
    engine_group = _wait(box, driver, "scored", 2)
    assert engine_group["pgid"] != group["pgid"]
    os.kill(_member(engine_group, lambda c: "EngineCore" in c), signal.SIGKILL)
    out, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, out + err
    assert wait_gone([group, engine_group], 30) < 30

    trials = _trials(url, "serverkill")
    api_killed, engine_killed = trials[0], trials[1]
    for trial in (api_killed, engine_killed):
        assert trial.state == TrialState.FAIL, (trial.state, trial.user_attrs)
        assert trial.user_attrs[TrialAttr.FAILURE_KIND] == "server_crashed", trial.user_attrs
        assert TrialAttr.REQUEUED_FROM not in trial.user_attrs  # the config's fault, not re-run
    reason = str(api_killed.user_attrs.get(TrialAttr.FAILURE_REASON))
    assert "the vLLM server died during the workload after" in reason, reason
    assert "killed by SIGKILL" in reason, reason
    reason = str(engine_killed.user_attrs.get(TrialAttr.FAILURE_REASON))
    assert "the vLLM server died during the workload after" in reason, reason
    assert any(t.state == TrialState.COMPLETE for t in trials[2:])  # the study went on
    assert not any(t.user_attrs.get(TrialAttr.REQUEUED_FROM) is not None for t in trials)
    store = Store(url)
    try:
        # The failed trials' starts are stored with how the server ended; nothing twice.
        numbers = store.trial_numbers("serverkill")
        assert numbers == sorted(t.number for t in trials if t.state != TrialState.WAITING)
    finally:
        store.close()
    assert not box.servers()


def test_server_dying_at_its_first_request_is_infeasible_with_vllms_line(
    tmp_path: Path, box: Box, tiny_hybrid_path: Path
) -> None:
    model = dict(
        name="tiny-hybrid-mtp", checkpoint="tiny-hybrid-mtp", prepare="tiny-hybrid-mtp",
        served_name="tiny-hybrid-mtp", max_model_len=4096, hybrid=True, mtp_layers=1,
        load_format="dummy", enable_prefix_caching=True,
        server_env={"VLLM_USE_AOT_COMPILE": "0"},
    )  # fmt: skip
    # One config without speculation (the baseline, first) and one with MTP: vLLM runs the
    # Triton kernel that the CPU build lacks only for a hybrid model with prefix caching and
    # speculative decoding (the "align" Mamba cache mode's fused postprocess).
    space = short_space(
        tmp_path,
        preset="tiny-hybrid-mtp",
        model=model,
        space={
            "methods": ["none", "mtp"],
            "num_speculative_tokens": {"low": 1, "high": 1},
            "kv_cache_memory_bytes": [500_000_000],
            "max_num_seqs": [4],
        },
        baseline={"kv_cache_memory_bytes": 500_000_000, "max_num_seqs": 4},
    )
    url = f"sqlite:///{tmp_path / 'firstrequest.db'}"
    proc = subprocess.run(
        optimize_argv(space, url, "firstrequest", 2),
        env=box.env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    baseline, trial = _trials(url, "firstrequest")
    assert baseline.state == TrialState.COMPLETE and baseline.value, baseline.user_attrs
    assert trial.params["method"] == "mtp"
    reason = str(trial.user_attrs.get(TrialAttr.FAILURE_REASON))
    if (
        trial.state == TrialState.COMPLETE
        and trial.value
        and not trial.user_attrs.get(TrialAttr.INFEASIBLE)
    ):
        # Seen on 2026-11-30 (vLLM 0.32.0 CPU): the MTP server answered its whole workload, so
        # the fault this test injects did not happen; it is not counted as survived.
        pytest.skip(
            "the fault did not occur: the tiny hybrid with MTP and prefix caching served its "
            f"workload on this vLLM ({trial.value:.0f} tasks/h)"
        )
    assert trial.user_attrs[TrialAttr.INFEASIBLE] is True, trial.user_attrs
    assert trial.state == TrialState.COMPLETE and trial.value == 0.0
    assert "the vLLM server died at its first request" in reason, reason
    assert "TypeError: 'function' object is not subscriptable" in reason, reason
    assert not box.servers()


def test_context_too_long_says_why_per_task_in_the_cli_and_the_records(
    tmp_path: Path, box: Box, smollm2_path: Path
) -> None:
    launcher = Launcher(log_dir=box.cache / "logs", state_dir=box.state_dir)
    spec = ServerSpec(
        model=str(smollm2_path), served_model_name="smollm2", max_model_len=1536,
        kv_cache_memory_bytes=300_000_000, env={"VLLM_USE_AOT_COMPILE": "0"},
        extra_args=("--enforce-eager",),  # vLLM refuses the long prompts compiled or not
    )  # fmt: skip
    with launcher.launch(spec, timeout_s=600) as handle:
        proc = subprocess.run(
            [
                sys.executable, "-m", "tuner.cli", "workload", "run", "--url", handle.base_url,
                "--model", "smollm2", "--tokenizer", str(smollm2_path), "--shape", "cpu",
                "--protocol", "text", "--tasks", "4", "--agents", "2", "--warmup", "0",
                "--tool-latency", "0",
            ],
            env={**box.env, "COLUMNS": "600"}, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        settings = WorkloadSettings(
            tasks=4, agents=2, warmup_tasks=0, tool_protocol="text", tool_latency_s=0.0,
            shape=SuiteShape.cpu_small(),
        )  # fmt: skip
        record = run_workload_sync(
            handle.base_url, "smollm2", settings, tokenizer=str(smollm2_path)
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    refused = [t for t in record.task_records if not t.success]

    def says_why(reason: str) -> bool:
        # vLLM refuses in one of two ways, each with its numbers: a prompt over the context
        # ("maximum context length is 1536 tokens ... N input tokens"), or a forced completion
        # that no longer fits ("... had 2 tokens left for a turn of 33").
        return reason.startswith("context_overflow: ") and (
            ("maximum context length is 1536 tokens" in reason and "input tokens" in reason)
            or re.search(r"had \d+ tokens left for a turn of \d+", reason) is not None
        )

    assert refused, "no task outgrew the 1536-token context"
    for task in refused:
        assert says_why(task.failure_reason or ""), task.failure_reason
    assert "failed" in proc.stdout and "context_overflow" in proc.stdout, proc.stdout
    # Stored as the driver stores a trial's workload: the reasons come back from the database.
    store = Store(f"sqlite:///{tmp_path / 'records.db'}")
    try:
        store.add_workload_run("ctx", 0, record)
        (stored,) = store.workload_runs("ctx", with_tasks=True)
        back = [t.failure_reason for t in stored.record.task_records if not t.success]
    finally:
        store.close()
    assert back == [t.failure_reason for t in refused]
    assert not box.servers()
