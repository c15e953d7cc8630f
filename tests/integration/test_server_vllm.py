"""The launcher against real vLLM (CPU build): facts, failure classes, MTP, stop and reaping.

Starts five servers in all (two fail early): plain SmolLM2, an ngram SmolLM2 held by a process
that the test kills, a too-small KV cache, a speculative config vLLM rejects, and the tiny
hybrid model with MTP. Run under `flock /tmp/tuner-vllm.lock`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tuner.records import StartupFacts
from tuner.server import (
    FailureKind,
    Launcher,
    ServerHandle,
    ServerSpec,
    SpeculativeSpec,
    parse_log,
    parse_metric_labels,
)
from tuner.server.failures import StartupFailed
from tuner.server.reaper import group_members, port_free
from tuner.testing import ServerPool

pytestmark = pytest.mark.vllm

SMALL_KV_BYTES = 1_000_000_000  # the `smollm2_spec` fixture's size
STARTUP_TIMEOUT_S = 600.0


def _chat(handle: ServerHandle, text: str, max_tokens: int) -> dict[str, object]:
    body = {
        "model": handle.spec.served_model_name or handle.spec.model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
    }
    response = httpx.post(f"{handle.base_url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return dict(response.json())


def _metric(metrics: str, name: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module")
def plain_facts(vllm_pool: ServerPool, smollm2_spec: ServerSpec) -> StartupFacts:
    """The facts of the plain server (started once, shared with the KV-size comparison)."""
    return vllm_pool.get(smollm2_spec).facts


def test_plain_server_facts_match_cache_config_info(
    vllm_pool: ServerPool, smollm2_spec: ServerSpec, plain_facts: StartupFacts
) -> None:
    handle = vllm_pool.get(smollm2_spec)
    metrics = httpx.get(f"{handle.base_url}/metrics", timeout=10).text
    info = parse_metric_labels(metrics)
    from_log = parse_log(handle.log_path.read_text())

    assert from_log.kv_cache_tokens is not None and from_log.kv_cache_tokens > 8192
    assert from_log.kv_cache_tokens == int(info["num_gpu_blocks"]) * int(info["block_size"])
    if "kv_cache_size_tokens" in info:
        assert from_log.kv_cache_tokens == int(info["kv_cache_size_tokens"])
    assert plain_facts.kv_cache_tokens == from_log.kv_cache_tokens
    assert plain_facts.block_size == 128  # the CPU backend's block
    assert plain_facts.max_concurrency == pytest.approx(from_log.kv_cache_tokens / 8192, abs=0.01)
    assert plain_facts.vllm_version == "0.32.0"
    assert plain_facts.engine_init_seconds is not None and plain_facts.engine_init_seconds > 0
    assert plain_facts.startup_seconds is not None
    assert plain_facts.startup_seconds > plain_facts.engine_init_seconds

    reply = _chat(handle, "Say hello.", max_tokens=8)
    usage = reply["usage"]
    assert isinstance(usage, dict)
    assert usage["completion_tokens"] == 8
    # --enable-prompt-tokens-details is on by default: the workload needs cached tokens.
    assert usage["prompt_tokens_details"] is not None


_HOLDER = """
import json, sys, time
from pathlib import Path
from tuner.server import Launcher, ServerSpec
spec = ServerSpec.model_validate_json(sys.argv[1])
launcher = Launcher(log_dir=Path(sys.argv[2]), state_dir=Path(sys.argv[3]))
handle = launcher.launch(spec, timeout_s=float(sys.argv[5]))
out = {"pid": handle.pid, "port": handle.port, "kv": handle.facts.kv_cache_tokens}
Path(sys.argv[4]).write_text(json.dumps(out))
time.sleep(3600)
"""


def test_ngram_server_starts_with_its_own_kv_size_and_dies_with_its_owner(
    vllm_pool: ServerPool,
    smollm2_spec: ServerSpec,
    plain_facts: StartupFacts,
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    vllm_pool.stop()
    spec = smollm2_spec.replace(
        kv_cache_memory_bytes=2 * SMALL_KV_BYTES,
        speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
    )
    state_dir, ready_file = tmp_path / "run", tmp_path / "ready.json"
    holder_args = [spec.model_dump_json(), str(cache_dir / "logs"), str(state_dir)]
    holder_args += [str(ready_file), str(STARTUP_TIMEOUT_S)]
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, *holder_args])
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S + 30
        while not ready_file.exists():
            assert holder.poll() is None, "the holder process failed to start the server"
            assert time.monotonic() < deadline
            time.sleep(0.5)
        started = json.loads(ready_file.read_text())
        base_url = f"http://127.0.0.1:{started['port']}"
        # Twice the KV bytes, about twice the tokens: the size follows the flag.
        assert plain_facts.kv_cache_tokens is not None
        assert started["kv"] > 1.8 * plain_facts.kv_cache_tokens
        # A raw prompt that repeats itself, greedy and without an early stop: the proposer finds
        # its last n-gram earlier in the prompt whatever the model continues with. (A one-line
        # chat request drafted on a Zen 4 and not on a Zen 3, where the bf16 matmuls fall back
        # to torch's kernels and the greedy answer differs.)
        body = {"model": "smollm2", "prompt": "1 2 3 4 1 2 3 4 1 2 3 4 1 2 3 4 1 2 3"}
        options = {"max_tokens": 16, "temperature": 0, "ignore_eos": True}
        answer = httpx.post(f"{base_url}/v1/completions", json={**body, **options}, timeout=120)
        assert answer.status_code == 200, answer.text
        metrics = httpx.get(f"{base_url}/metrics", timeout=10).text
        assert (_metric(metrics, "vllm:spec_decode_num_drafts_total") or 0) > 0
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()

    # The owner died by SIGKILL: the group's supervisor takes API server, engine core and
    # workers down within seconds, without waiting for the next launcher.
    killed_at = time.monotonic()
    while group_members(started["pid"]) and time.monotonic() - killed_at < 30:
        time.sleep(0.1)
    gone_s = time.monotonic() - killed_at
    assert group_members(started["pid"]) == [], "vLLM processes outlived their owner by 30 s"
    assert gone_s < 10, f"the server group took {gone_s:.1f} s to go"
    launcher = Launcher(log_dir=tmp_path / "logs", state_dir=state_dir)
    assert launcher.reaped == []  # nothing left to reap; the stale pid file is dropped
    assert port_free("127.0.0.1", started["port"])
    assert list(state_dir.glob("server-*.json")) == []


def test_too_small_kv_cache_fails_as_context_too_long(
    vllm_pool: ServerPool, vllm_launcher: Launcher, smollm2_spec: ServerSpec
) -> None:
    vllm_pool.stop()
    spec = smollm2_spec.replace(kv_cache_memory_bytes=20_000_000)
    with pytest.raises(StartupFailed) as raised:
        vllm_launcher.launch(spec, timeout_s=STARTUP_TIMEOUT_S)
    failure = raised.value.failure
    assert failure.kind is FailureKind.CONTEXT_TOO_LONG
    assert failure.infeasible
    assert failure.exit_code == 1
    assert failure.details["max_model_len"] == 8192
    estimated = failure.details["estimated_max_model_len"]
    assert 0 < estimated < 8192
    log = Path(failure.log_path).read_text()
    assert f"the estimated maximum model length is {estimated}." in log
    assert f"estimated maximum model length is {estimated}" in failure.excerpt
    assert failure.record().failure_kind == "context_too_long"


def test_speculative_config_rejected_by_vllm_is_invalid_config(
    vllm_pool: ServerPool, vllm_launcher: Launcher, smollm2_spec: ServerSpec
) -> None:
    vllm_pool.stop()
    # Passed as an extra flag so that our own validation (which would refuse it) is bypassed.
    bad = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5}
    bad["prompt_lookup_max"] = 2
    spec = smollm2_spec.replace(extra_args=("--speculative-config", json.dumps(bad)))
    with pytest.raises(StartupFailed) as raised:
        vllm_launcher.launch(spec, timeout_s=STARTUP_TIMEOUT_S)
    failure = raised.value.failure
    assert failure.kind is FailureKind.INVALID_SPECULATIVE_CONFIG
    assert "prompt_lookup_min=5 must be <= prompt_lookup_max=2" in failure.message
    assert "SpeculativeConfig" in failure.excerpt
    assert failure.infeasible


@pytest.mark.extended  # out of CI since 2026-12-07: CI's minutes on a Zen 3 (docs/ci.md)
def test_tiny_hybrid_with_mtp_counts_drafts_and_stop_leaves_nothing(
    vllm_pool: ServerPool, vllm_launcher: Launcher, tiny_hybrid_path: Path
) -> None:
    vllm_pool.stop()
    spec = ServerSpec(
        model=str(tiny_hybrid_path),
        served_model_name="tiny-hybrid",
        load_format="dummy",
        enable_prefix_caching=False,  # hybrid + prefix caching fails on CPU (docs/vllm-facts.md)
        kv_cache_memory_bytes=SMALL_KV_BYTES,
        max_model_len=4096,
        speculative=SpeculativeSpec(method="mtp", num_speculative_tokens=1),
    )
    assert spec.resolved_mtp_layers() == 1
    with vllm_launcher.launch(spec, timeout_s=STARTUP_TIMEOUT_S) as handle:
        pid, port = handle.pid, handle.port
        assert handle.facts.kv_cache_tokens is not None and handle.facts.kv_cache_tokens > 0
        reply = _chat(handle, "Count: one two three", max_tokens=8)
        assert isinstance(reply["usage"], dict) and reply["usage"]["completion_tokens"] == 8
        metrics = httpx.get(f"{handle.base_url}/metrics", timeout=10).text
        drafts = _metric(metrics, "vllm:spec_decode_num_drafts_total")
        assert drafts is not None and drafts > 0
        assert _metric(metrics, "vllm:spec_decode_num_draft_tokens_total") == drafts
        assert _metric(metrics, "vllm:spec_decode_num_accepted_tokens_total") is not None
        assert group_members(pid) != []
    assert handle.stopped
    assert handle.record().ended_at is not None
    assert group_members(pid) == []
    assert port_free("127.0.0.1", port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
