"""The real launcher driving the fake vLLM server: readiness, facts, failures, stop, reaping."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tuner.errors import ServerError
from tuner.server import FailureKind, Launcher, ServerHandle, ServerSpec, free_port
from tuner.server.failures import StartupFailed
from tuner.server.reaper import group_members, port_free
from tuner.server.startup_log import startup_phase
from tuner.settings import LaunchCommand

FAKE = LaunchCommand((sys.executable, "-m", "tuner.testing.fake_vllm"))


class RecordingLauncher(Launcher):
    """The real launcher, remembering each started handle (to check failed starts' groups)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(
            log_dir=tmp_path / "logs",
            state_dir=tmp_path / "run",
            work_dir=tmp_path / "work",
            launch_command=FAKE,
        )
        self.handles: list[ServerHandle] = []

    def _wait_ready(self, handle: ServerHandle, *args: Any) -> Any:
        self.handles.append(handle)
        return super()._wait_ready(handle, *args)


def _launcher(tmp_path: Path) -> RecordingLauncher:
    return RecordingLauncher(tmp_path)


def _spec(**env: str) -> ServerSpec:
    return ServerSpec(model="fake-model", served_model_name="fake", env={**env})


def _assert_gone(pid: int, port: int) -> None:
    assert group_members(pid) == []
    assert port_free("127.0.0.1", port)


@pytest.fixture
def launcher(tmp_path: Path) -> RecordingLauncher:
    return _launcher(tmp_path)


def test_launch_reads_facts_and_stop_leaves_nothing(launcher: RecordingLauncher) -> None:
    spec = _spec(FAKE_VLLM_KV_TOKENS="4096", FAKE_VLLM_STARTUP_S="0.3")
    handle = launcher.launch(spec, timeout_s=30)
    assert httpx.get(f"{handle.base_url}/health").status_code == 200
    assert handle.facts.kv_cache_tokens == 4096
    assert handle.facts.num_gpu_blocks == 256
    assert handle.facts.block_size == 16
    assert handle.facts.max_concurrency == 0.5
    assert handle.facts.vllm_version == "0.32.0"
    assert handle.facts.startup_seconds is not None
    assert 0.3 <= handle.facts.startup_seconds < 10
    assert "GPU KV cache size: 4,096 tokens" in handle.log_path.read_text()
    pid_files = list(launcher.state_dir.glob("server-*.json"))
    assert [json.loads(p.read_text())["pid"] for p in pid_files] == [handle.pid]

    stop_s = handle.stop()
    assert 0 < stop_s < 5
    _assert_gone(handle.pid, handle.port)
    assert list(launcher.state_dir.glob("server-*.json")) == []
    assert handle.stop() == 0.0  # idempotent
    record = handle.record()
    assert record.ended_at is not None and record.ended_at >= record.started_at
    assert record.exit_status == 0  # the fake exits cleanly on SIGTERM
    assert record.facts.kv_cache_tokens == 4096
    assert record.env == {"FAKE_VLLM_KV_TOKENS": "4096", "FAKE_VLLM_STARTUP_S": "0.3"}


def test_fixed_port_in_use_is_refused_before_launch(launcher: RecordingLauncher) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is in use"):
            launcher.launch(_spec().replace(port=port), timeout_s=30)
    assert launcher.handles == []


def test_fixed_port_is_used(launcher: RecordingLauncher) -> None:
    port = free_port()
    with launcher.launch(_spec().replace(port=port), timeout_s=30) as handle:
        assert handle.port == port
        assert handle.base_url == f"http://127.0.0.1:{port}"
        assert handle.argv[handle.argv.index("--port") + 1] == str(port)


def test_mamba_failure_parses_numbers_and_the_clamped_retry_starts(
    launcher: RecordingLauncher,
) -> None:
    spec = _spec(FAKE_VLLM_MAMBA_BLOCKS="501")
    with pytest.raises(StartupFailed) as raised:
        launcher.launch(spec, timeout_s=30, attempt=3)
    failure = raised.value.failure
    assert failure.record().attempt == 3
    assert failure.kind is FailureKind.MAMBA_BLOCKS_EXCEEDED
    assert failure.details == {"requested": 512, "available": 501}
    assert failure.exit_code == 1
    assert not failure.infeasible
    assert Path(failure.log_path).is_file()
    assert "exceeds available Mamba cache blocks (501)" in failure.excerpt
    assert failure.argv[:3] == FAKE.argv
    assert failure.env == {"FAKE_VLLM_MAMBA_BLOCKS": "501"}
    assert failure.ended_at is not None and failure.ended_at >= failure.started_at
    assert raised.value.log_path == Path(failure.log_path)
    assert list(launcher.state_dir.glob("server-*.json")) == []
    assert group_members(launcher.handles[0].pid) == []

    retry = spec.replace(max_num_seqs=failure.details["available"])
    with launcher.launch(retry, timeout_s=30, attempt=1) as handle:
        assert handle.record().attempt == 1
        assert "--max-num-seqs" in handle.argv


def test_unknown_failure_is_a_crash_with_the_log_tail(launcher: RecordingLauncher) -> None:
    with pytest.raises(StartupFailed) as raised:
        launcher.launch(_spec(FAKE_VLLM_FAIL="RuntimeError: something odd"), timeout_s=30)
    failure = raised.value.failure
    assert failure.kind is FailureKind.CRASHED
    assert failure.message == "exited with status 1: RuntimeError: something odd"
    assert failure.details == {"exit_code": 1}
    assert "vLLM API server version" in failure.excerpt


def test_startup_timeout_stops_the_group(launcher: RecordingLauncher) -> None:
    began = time.monotonic()
    with pytest.raises(StartupFailed) as raised:
        launcher.launch(_spec(FAKE_VLLM_STARTUP_S="60"), timeout_s=1.0)
    failure = raised.value.failure
    assert failure.kind is FailureKind.STARTUP_TIMEOUT
    assert failure.details == {"timeout_s": 1.0}
    assert failure.exit_code is None
    assert time.monotonic() - began < 10
    [handle] = launcher.handles
    _assert_gone(handle.pid, handle.port)


def test_context_manager_stops_on_error(launcher: RecordingLauncher) -> None:
    with pytest.raises(RuntimeError, match="boom"), launcher.launch(_spec(), timeout_s=30) as h:
        pid, port = h.pid, h.port
        raise RuntimeError("boom")
    _assert_gone(pid, port)


def _model(handle: ServerHandle) -> str:
    return handle.argv[handle.argv.index("--model") + 1]


def _cwd(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/cwd")


def test_a_server_runs_in_the_launchers_directory_when_the_callers_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen on an H200: the directory a study was started from was replaced under it, and every
    # later vLLM died at start on getcwd(). The server must not depend on the caller's.
    gone = tmp_path / "synced-copy"
    gone.mkdir()
    monkeypatch.chdir(gone)
    launcher = _launcher(tmp_path)
    gone.rmdir()
    with launcher.launch(_spec(), timeout_s=30) as handle:
        assert httpx.get(f"{handle.base_url}/health").status_code == 200
        members = group_members(handle.pid)
        assert len(members) >= 2  # the supervisor and the server under it
        assert {_cwd(pid) for pid in members} == {str(tmp_path / "work")}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_an_inherited_arctic_switch_does_not_reach_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ARCTIC_INFERENCE_ENABLED=1 in a user's shell would turn on arctic-inference's vLLM plugin,
    # which refuses the CPU build at every start (tests/integration/test_arctic_plugin.py).
    monkeypatch.setenv("ARCTIC_INFERENCE_ENABLED", "1")
    monkeypatch.setenv("TUNER_TEST_INHERITED", "kept")
    with _launcher(tmp_path).launch(_spec(), timeout_s=30) as handle:
        members = group_members(handle.pid)
        assert len(members) >= 2  # the supervisor and the server under it
        for pid in members:
            env = _environ(pid)
            assert env.get("TUNER_TEST_INHERITED") == "kept"
            assert "ARCTIC_INFERENCE_ENABLED" not in env
    # A spec that sets it means it: the server gets it (and the exported command says it).
    with _launcher(tmp_path).launch(_spec(ARCTIC_INFERENCE_ENABLED="1"), timeout_s=30) as handle:
        assert {
            _environ(pid).get("ARCTIC_INFERENCE_ENABLED") for pid in group_members(handle.pid)
        } == {"1"}


def test_relative_command_and_model_paths_are_found_from_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = tmp_path / "bin" / "my-vllm"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m tuner.testing.fake_vllm "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    launcher = Launcher(
        log_dir=Path("logs"),
        state_dir=Path("run"),
        work_dir=Path("work"),
        launch_command=LaunchCommand(("bin/my-vllm",)),
    )
    (tmp_path / "ckpt").mkdir()
    spec = _spec().replace(model="ckpt")
    with launcher.launch(spec, timeout_s=30) as handle:
        assert handle.argv[0] == str(wrapper)
        assert _model(handle) == str(tmp_path / "ckpt")  # a local model, also relative
        assert _cwd(handle.pid) == str(tmp_path / "work")
        assert handle.log_path.parent == tmp_path / "logs"
    # A hub id is no local directory: passed as it is.
    with launcher.launch(_spec().replace(model="org/name"), timeout_s=30) as handle:
        assert _model(handle) == "org/name"


def test_interrupt_while_waiting_stops_the_group(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    class Interrupted(Launcher):
        """Ctrl-C arrives while the server is still building its engine."""

        def _wait_ready(self, handle: ServerHandle, *args: Any) -> Any:
            seen["pid"] = handle.pid
            seen["alive"] = group_members(handle.pid) != []
            raise KeyboardInterrupt

    launcher = Interrupted(
        log_dir=tmp_path / "logs", state_dir=tmp_path / "run", launch_command=FAKE
    )
    with pytest.raises(KeyboardInterrupt):
        launcher.launch(_spec(FAKE_VLLM_STARTUP_S="60"), timeout_s=30)
    assert seen["alive"]
    assert group_members(seen["pid"]) == []
    assert list(launcher.state_dir.glob("server-*.json")) == []


_HOLDER = """
import sys, time
from pathlib import Path
from tuner.server import Launcher, ServerSpec
from tuner.settings import LaunchCommand
launcher = Launcher(log_dir=Path(sys.argv[1]), state_dir=Path(sys.argv[2]),
                    launch_command=LaunchCommand((sys.executable, "-m", "tuner.testing.fake_vllm")))
handle = launcher.launch(ServerSpec(model="fake"), timeout_s=30)
print(handle.pid, handle.port, flush=True)
time.sleep(600)
"""


def _start_holder(tmp_path: Path) -> tuple[subprocess.Popen[str], int, int]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "logs"), str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    pid, port = (int(x) for x in holder.stdout.readline().split())
    return holder, pid, port


def _sigkill(holder: subprocess.Popen[str]) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    if holder.stdout is not None:
        holder.stdout.close()


def test_server_of_a_sigkilled_owner_is_stopped_by_its_supervisor(tmp_path: Path) -> None:
    holder, pid, port = _start_holder(tmp_path)
    try:
        # A live owner's server is left alone by other launchers sharing the directory.
        assert _launcher(tmp_path).reaped == []
        assert group_members(pid) != []
    finally:
        _sigkill(holder)
    deadline = time.monotonic() + 10.0
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _assert_gone(pid, port)
    assert "is gone; stopping the server" in next((tmp_path / "logs").glob("*.log")).read_text()


def test_server_of_a_killed_owner_is_reaped_by_the_next_launcher(tmp_path: Path) -> None:
    holder, pid, port = _start_holder(tmp_path)
    # A supervisor that cannot act (stopped here; OOM-killed or frozen in real life) leaves
    # the group to the reaper.
    os.kill(pid, signal.SIGSTOP)
    _sigkill(holder)
    time.sleep(0.5)
    assert group_members(pid) != []  # SIGKILL runs no cleanup: the server is orphaned
    reaping = _launcher(tmp_path)
    assert [(r.pid, r.port) for r in reaping.reaped] == [(pid, port)]
    _assert_gone(pid, port)
    assert list((tmp_path / "run").glob("server-*.json")) == []


def test_a_picked_port_taken_before_the_bind_is_retried_on_another(
    launcher: RecordingLauncher, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuner.server.launcher as launcher_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: binds fail, connections refused
        picks = iter([taken.getsockname()[1], free_port()])
        monkeypatch.setattr(launcher_module, "free_port", lambda host: next(picks))
        with launcher.launch(_spec(FAKE_VLLM_STARTUP_S="0"), timeout_s=30) as handle:
            assert handle.port != taken.getsockname()[1]
    first, second = launcher.handles
    assert "Address already in use" in first.log_path.read_text()
    assert second is handle


ASSET_LOGS = Path(__file__).parents[1] / "assets" / "logs"


def test_the_start_up_phase_is_the_last_one_vllms_log_names() -> None:
    # A real vLLM 0.32 CPU log, cut where the API server had read the model's config, then
    # where the worker had sized its KV cache.
    real = (ASSET_LOGS / "cpu-kv-too-small.log").read_text().splitlines()
    assert startup_phase("\n".join(real[:9])) == "reading the model's config"
    assert startup_phase("\n".join(real[:11])) == "sizing the KV cache"
    assert startup_phase("Triton is installed, but doesn't include CPU backend.") is None
    # vLLM's own words for the later phases (v1/worker/cpu_model_runner.py, compilation/).
    text = "\n".join(real[:11]) + (
        "\n(EngineCore pid=1) INFO [cpu_model_runner.py:87] Warming up model for the compilation"
    )
    assert startup_phase(text) == "warm-up: compiling for the batch shapes"
    assert startup_phase("INFO [monitor.py:40] Starting torch.compile") == "compiling"


def test_a_start_is_heard_while_it_waits(tmp_path: Path) -> None:
    heard: list[tuple[float, str | None]] = []
    launcher = Launcher(log_dir=tmp_path / "logs", state_dir=tmp_path / "run", launch_command=FAKE)
    spec = ServerSpec(model="m", env={"FAKE_VLLM_STARTUP_S": "2.0"})
    with launcher.launch(spec, timeout_s=30, on_wait=lambda s, p: heard.append((s, p))):
        pass
    assert len(heard) >= 2 and heard[0][0] < 0.5 and heard[-1][0] >= 1.0, heard
    phases = [p for _, p in heard]
    assert "loading weights" in phases and "warm-up: compiling for the batch shapes" in phases
