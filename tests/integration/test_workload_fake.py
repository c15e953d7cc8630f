"""`tuner workload run|describe` and `tuner bench throughput` end to end against the stub server.

The stub (`python -m tuner.testing.fake_vllm`) is a real process speaking HTTP, ready in well
under a second; the real-vLLM runs are in test_workload_vllm.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tuner.cli import main
from tuner.workload import SuiteShape, WorkloadSettings, run_workload_sync


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner.testing.fake_vllm", "--model", "stub", "--port", str(port)],
        env={**os.environ, "FAKE_VLLM_STARTUP_S": "0", "FAKE_VLLM_SPEC": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_workload_run_prints_the_result_table(
    stub_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(
        ["workload", "run", "--url", stub_url, "--model", "stub", "--shape", "cpu",
         "--tasks", "6", "--agents", "2", "--warmup", "1", "--protocol", "text",
         "--tool-latency", "0"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "successful tasks/hour" in out
    assert "6/6 = 100.0%" in out
    assert "draft acceptance" in out  # the stub counts drafts with FAKE_VLLM_SPEC=1
    assert "prefix reuse (steps)" in out and "first 6" in " ".join(out.split())


def test_workload_run_against_no_server_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    code, out, err = _cli(["workload", "run", "--url", url, "--model", "m"], capsys)
    assert code == 2 and not out.strip()
    assert err.strip() == (
        f"error: cannot reach the vLLM server at {url} (ConnectError): start it or fix --url"
    )


def test_bad_options_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(["workload", "run", "--url", "http://x", "--model", "m",
                         "--mode", "dream"], capsys)  # fmt: skip
    assert code == 2 and "mode" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(["workload", "describe", "--shape", "huge"], capsys)
    assert code == 2 and "unknown shape 'huge'" in err


def test_traces_replay_through_the_cli(
    stub_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    conversation = (
        '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"},'
        ' {"role": "user", "content": "bye"}, {"role": "assistant", "content": "goodbye"}]'
    )
    path.write_text(f"{conversation}\n{conversation}\nnot json\n")
    code, _, err = _cli(["workload", "run", "--url", stub_url, "--model", "stub",
                         "--traces", str(path)], capsys)  # fmt: skip
    assert code == 2
    assert (
        err.strip() == f"error: traces file {path} line 3: not JSON (Expecting value at column 1)"
    )
    path.write_text(f"{conversation}\n{conversation}\n")
    code, out, err = _cli(["workload", "run", "--url", stub_url, "--model", "stub", "--traces",
                           str(path), "--warmup", "0"], capsys)  # fmt: skip
    assert code == 0, err
    assert "2/2 = 100.0%" in out


def test_bench_throughput_prints_tokens_per_second(
    stub_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(["bench", "throughput", "--url", stub_url, "--model", "stub",
                           "--streams", "1", "--streams", "3", "--output-tokens", "16"],
                          capsys)  # fmt: skip
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.strip().startswith("│")]
    assert len(rows) == 2
    assert rows[0].split("│")[1].strip() == "1" and rows[1].split("│")[1].strip() == "3"
    assert rows[1].split("│")[3].strip() == "192"  # 12 requests x 16 forced tokens


def test_describe_says_when_tokens_are_estimated(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(["workload", "describe", "--shape", "cpu", "--tasks", "8"], capsys)
    assert code == 0
    assert "estimated (no tokenizer given" in " ".join(out.split())
    assert "final context" in out


def test_sync_runner_owns_its_client(stub_url: str) -> None:
    settings = WorkloadSettings(tasks=4, agents=2, warmup_tasks=0, tool_protocol="text",
                                tool_latency_s=0.0, shape=SuiteShape.cpu_small())  # fmt: skip
    record = run_workload_sync(stub_url, "stub", settings)
    assert record.tasks == 4 and record.successes == 4
    assert record.spec_drafts and record.spec_drafts > 0
    assert record.prefix_cache_hit_ratio is not None and record.prefix_cache_hit_ratio > 0.5


def _served(url: str) -> tuple[float, float]:
    """(requests answered, output tokens) so far, from the fake's /metrics."""
    values = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(("vllm:request_success_total", "vllm:generation_tokens_total")):
            values[line.split("{", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return values["vllm:request_success_total"], values["vllm:generation_tokens_total"]


def test_warm_up_sweeps_every_concurrency_level_until_steady(stub_url: str) -> None:
    import asyncio

    from tuner.workload import TokenCounter
    from tuner.workload.agent import AgentContext
    from tuner.workload.runner import make_client
    from tuner.workload.warmup import MAX_SWEEPS, WARM_OUTPUT_TOKENS, warm_levels, warm_shapes

    assert warm_levels(1) == [1] and warm_levels(3) == [1, 2, 3]
    assert warm_levels(64) == [1, 2, 4, 8, 16, 32, 64]
    assert warm_levels(12) == [1, 2, 4, 8, 12]
    settings = WorkloadSettings(tasks=2, agents=3, tool_latency_s=0.0, shape=SuiteShape.cpu_small())

    async def sweep() -> object:
        async with make_client(settings) as client:
            ctx = AgentContext(
                client, f"{stub_url}/v1/chat/completions", "stub", settings,
                TokenCounter.estimate(), 16,
            )  # fmt: skip
            return await warm_shapes(ctx)

    before = _served(stub_url)
    result = asyncio.run(sweep())
    after = _served(stub_url)
    rates = result.rates  # type: ignore[attr-defined]
    assert 2 <= len(rates) <= MAX_SWEEPS and result.refused == 0  # type: ignore[attr-defined]
    requests = after[0] - before[0]
    assert requests == (1 + 2 + 3) * len(rates)  # levels 1, 2 and 3 in every sweep
    assert after[1] - before[1] == requests * WARM_OUTPUT_TOKENS
    # A scored run sweeps before its window: the fake served the sweeps' forced tokens first.
    before = _served(stub_url)
    record = run_workload_sync(stub_url, "stub", settings)
    warm_tokens = _served(stub_url)[1] - before[1] - (record.generation_tokens or 0)
    assert warm_tokens >= 2 * (1 + 2 + 3) * WARM_OUTPUT_TOKENS
    # A calibration's bound of one sweep (a slow box): levels 1, 2 and 3 once, no more.
    settings = settings.model_copy(update={"warmup_max_sweeps": 1})
    before = _served(stub_url)
    result = asyncio.run(sweep())
    assert len(result.rates) == 1  # type: ignore[attr-defined]
    assert _served(stub_url)[0] - before[0] == 1 + 2 + 3
