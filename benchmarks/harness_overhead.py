"""How much the agent runner costs on top of the HTTP requests it sends.

Starts the instant-answer stub (`python -m tuner.testing.fake_vllm`), then sends the same
replay requests twice over: through `run_workload` and through a bare httpx loop that posts the
identical bodies with the same number of concurrent agents and reads each stream to its end.
Prints the runner's request rate as a ratio of the bare loop's (goal >= 0.8) and the runner's
p50 per-step overhead (goal < 2 ms): the median over tasks of wall time per step, runner minus
bare loop (everything the runner adds: building messages, counting forced lengths, parsing
the stream, records), and, as a cross-check, the runner's own time outside its requests. On a
shared machine wall times are noisy, so each repeat runs both loops back to back, the ratio is
the median of the paired ratios, and the client-process CPU time per request of both loops is
printed too (the extra CPU the runner spends per step does not depend on the machine's load).

    python benchmarks/harness_overhead.py [--tasks 48] [--agents 4] [--repeat 3]
        [--tokenizer PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from typing import Any

import httpx

from tuner.records import WorkloadRecord
from tuner.workload import (
    ReplayScript,
    SuiteShape,
    TokenCounter,
    WorkloadSettings,
    build_task_set,
    make_client,
    run_workload,
    script_for_task,
)
from tuner.workload.runner import _jobs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bodies(script: ReplayScript, counter: TokenCounter) -> list[dict[str, Any]]:
    """The request bodies the runner sends for `script` (same messages, same forced lengths)."""
    messages = list(script.head)
    bodies = []
    for turn in script.turns:
        forced = max(1, counter.count(turn.text))
        bodies.append(
            {
                "model": "m",
                "messages": messages,
                "stream": True,
                "stream_options": {"include_usage": True},
                "temperature": 0.0,
                "max_tokens": forced,
                "min_tokens": forced,
                "ignore_eos": True,
            }
        )
        messages = [*messages, turn.assistant, *turn.followups]
    return bodies


async def _bare(
    url: str, settings: WorkloadSettings, tasks: list[list[dict[str, Any]]]
) -> tuple[float, list[float]]:
    """Post every task's bodies in order, `settings.agents` tasks at a time.

    Returns:
        Wall seconds, and each task's wall seconds per step.
    """
    queue = deque(tasks)
    per_step: list[float] = []

    async def agent(client: httpx.AsyncClient) -> None:
        while queue:
            bodies = queue.popleft()
            start = time.perf_counter()
            for body in bodies:
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                    async for _line in r.aiter_lines():
                        pass
            per_step.append((time.perf_counter() - start) / len(bodies))

    async with make_client(settings) as client:
        start = time.perf_counter()
        await asyncio.gather(*(agent(client) for _ in range(settings.agents)))
        return time.perf_counter() - start, per_step


async def _runner(url: str, settings: WorkloadSettings, tokenizer: str | None) -> WorkloadRecord:
    async with make_client(settings) as client:
        return await run_workload(
            client, base_url=url, model="m", settings=settings, tokenizer=tokenizer
        )


def _outside_ms(record: WorkloadRecord) -> float:
    """p50 over tasks of (task wall - sum of its request latencies) / steps, in ms."""
    per_step = [
        (t.wall_s - sum(s.latency_s for s in t.steps)) / len(t.steps) * 1000
        for t in record.task_records
        if t.steps
    ]
    return statistics.median(per_step)


def _per_step_ms(record: WorkloadRecord) -> float:
    """p50 over tasks of task wall / steps, in ms."""
    return statistics.median(t.wall_s / len(t.steps) * 1000 for t in record.task_records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokenizer", default=None, help="count forced lengths with it")
    args = parser.parse_args()

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "FAKE_VLLM_STARTUP_S": "0"}
    stub = subprocess.Popen(
        [sys.executable, "-m", "tuner.testing.fake_vllm", "--model", "m", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        settings = WorkloadSettings(
            tasks=args.tasks, agents=args.agents, warmup_tasks=0, tool_protocol="text",
            tool_latency_s=0.0, shape=SuiteShape.cpu_small(),
        )  # fmt: skip
        counter = TokenCounter.load(args.tokenizer)
        tasks = [_bodies(script_for_task(t, settings), counter) for t in build_task_set(settings)]
        steps = sum(len(t) for t in tasks)
        # The runner's one-off setup (task generation, tokenizer load) is not per-step work.
        cpu = time.process_time()
        TokenCounter.load(args.tokenizer)
        _jobs(settings)
        setup_cpu = time.process_time() - cpu
        bare_rates, runner_rates, overheads, outside = [], [], [], []
        bare_cpu, runner_cpu = [], []
        for _ in range(args.repeat):
            httpx.post(f"{url}/reset_prefix_cache")
            cpu = time.process_time()
            wall, bare_per_step = asyncio.run(_bare(url, settings, tasks))
            bare_cpu.append((time.process_time() - cpu) / steps * 1000)
            bare_rates.append(steps / wall)
            httpx.post(f"{url}/reset_prefix_cache")
            cpu = time.process_time()
            record = asyncio.run(_runner(url, settings, args.tokenizer))
            runner_cpu.append((time.process_time() - cpu - setup_cpu) / steps * 1000)
            ran = sum(len(t.steps) for t in record.task_records)
            assert ran == steps, (ran, steps)
            runner_rates.append(ran / record.scored_wall_s)
            overheads.append(_per_step_ms(record) - statistics.median(bare_per_step) * 1000)
            outside.append(_outside_ms(record))
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    bare, runner = statistics.median(bare_rates), statistics.median(runner_rates)
    ratio = statistics.median(r / b for r, b in zip(runner_rates, bare_rates, strict=True))
    print(f"requests: {steps} ({args.tasks} tasks, {args.agents} agents), median of {args.repeat}")
    print(f"token counts: {counter.name}")
    print(f"bare httpx loop: {bare:8.1f} requests/s")
    print(f"agent runner:    {runner:8.1f} requests/s")
    print(f"ratio runner/bare: {ratio:.3f} (median of paired runs; goal >= 0.8)")
    print(
        f"runner p50 per-step overhead: {statistics.median(overheads):.3f} ms vs the bare loop, "
        f"{statistics.median(outside):.3f} ms outside requests  (goal < 2 ms)"
    )
    print(
        f"client CPU per request: runner {statistics.median(runner_cpu):.3f} ms, "
        f"bare {statistics.median(bare_cpu):.3f} ms (runner setup {setup_cpu * 1000:.0f} ms "
        "excluded)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
