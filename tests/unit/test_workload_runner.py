"""The runner against an in-process fake server (httpx.MockTransport): no process, no network.

`FakeChat` answers /health, /metrics and streamed chat completions. Its prefix "cache" serves
the longest block-aligned prefix of any earlier prompt. In live mode it can play an oracle
brain that replies with each task's scripted next action, so graded success is known.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tuner.errors import WorkloadError
from tuner.records import WorkloadRecord
from tuner.workload import (
    RunProgress,
    SuiteShape,
    Task,
    WorkloadSettings,
    build_task_set,
    run_workload,
    task_set_hash,
)
from tuner.workload.prompt import action_json

BLOCK = 16
URL = "http://fake:8000"

# vLLM 0.32's refusal of a prompt longer than the context (vllm/renderers/params.py).
VLLM_CONTEXT_MESSAGE = (
    "This model's maximum context length is 2048 tokens. However, your prompt contains 2300 "
    "input tokens, which exceeds this limit even without any output tokens. Please reduce the "
    "length of the input prompt."
)
VLLM_CONTEXT_ERROR = {
    "error": {
        "message": VLLM_CONTEXT_MESSAGE,
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
}


class FakeChat:
    """A fake vLLM: streamed chat completions with usage and cached tokens, and counters."""

    def __init__(self, brain: Callable[[dict[str, Any]], tuple[str, list[dict[str, Any]]]] | None
                 = None, *, delay_s: float = 0.0, status: int = 200) -> None:  # fmt: skip
        self.brain = brain
        self.delay_s = delay_s
        self.status = status
        self.prompts: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.counters = {"queries": 0, "hits": 0, "generated": 0}

    def metrics(self) -> str:
        c = self.counters
        return (
            f'vllm:cache_config_info{{block_size="{BLOCK}",engine="0"}} 1.0\n'
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0"}} {c["queries"]}\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0"}} {c["hits"]}\n'
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0"}} {c["generated"]}\n'
        )

    def _cached(self, prompt: str) -> int:
        best = 0
        for earlier in self.prompts:
            n = 0
            for a, b in zip(earlier, prompt, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        tokens = min(best, len(prompt) - 1) // 4
        return tokens - tokens % BLOCK

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200)
        if request.url.path == "/metrics":
            return httpx.Response(200, text=self.metrics())
        body = json.loads(request.content)
        self.bodies.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status != 200:
            return httpx.Response(self.status, json=VLLM_CONTEXT_ERROR)
        prompt = json.dumps(body["messages"])
        cached = self._cached(prompt)
        self.prompts.append(prompt)
        if self.brain is not None:
            text, calls = self.brain(body)
        else:
            text, calls = " ".join(["tok"] * body["max_tokens"]), []
        words = text.split(" ") if text else []
        self.counters["queries"] += len(prompt) // 4
        self.counters["hits"] += cached
        self.counters["generated"] += len(words)
        events = [{"choices": [{"delta": {"role": "assistant"}}]}]
        events += [{"choices": [{"delta": {"content": w + " "}}]} for w in words]
        if calls:
            events.append({"choices": [{"delta": {"tool_calls": calls}}]})
        events.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
        usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": max(1, len(words)),
                 "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip
        events.append({"choices": [], "usage": usage})
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})


def oracle_brain(tasks: list[Task], protocol: str) -> Callable[..., tuple[str, list[Any]]]:
    """Replies with each task's scripted next step: a perfect agent."""
    by_instruction = {t.instruction: t for t in tasks}

    def brain(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        messages = body["messages"]
        task = by_instruction[messages[1]["content"]]
        step = task.steps[sum(1 for m in messages if m["role"] == "assistant")]
        if step.call is None:
            return step.text, []
        if protocol == "text":
            return (
                f"{step.text}\n```json\n{action_json(step.call.tool, step.call.arguments)}\n```",
                [],
            )
        call = {"index": 0, "id": "c", "function": {"name": step.call.tool,
                "arguments": json.dumps(step.call.arguments)}}  # fmt: skip
        return step.text, [call]

    return brain


def _settings(**changes: Any) -> WorkloadSettings:
    fields: dict[str, Any] = {
        "tasks": 8, "agents": 2, "warmup_tasks": 2, "tool_protocol": "text",
        "tool_latency_s": 0.0, "shape": SuiteShape.cpu_small(),
    }  # fmt: skip
    return WorkloadSettings.model_validate(fields | changes)


def _run(fake: Any, settings: WorkloadSettings, **kw: Any) -> WorkloadRecord:
    async def main() -> WorkloadRecord:
        transport = httpx.MockTransport(fake)
        async with httpx.AsyncClient(transport=transport) as client:
            return await run_workload(
                client, base_url=URL + "/v1/", model="m", settings=settings, **kw
            )

    return asyncio.run(main())


def test_replay_records_every_step_with_forced_lengths_and_reuse() -> None:
    fake = FakeChat()
    settings = _settings(request_options={"chat_template_kwargs": {"enable_thinking": False}})
    record = _run(fake, settings)
    tasks = build_task_set(settings)
    scored = [t for t in record.task_records if not t.warmup]
    assert [t.task_id for t in scored] == [t.task_id for t in tasks]
    assert sum(t.warmup for t in record.task_records) == 2
    assert record.tasks == 8 and record.successes == 8 and record.success_rate == 1.0
    assert record.task_set_hash == task_set_hash([t.task_id for t in tasks], settings.shape)
    for task, rec in zip(tasks, scored, strict=True):
        assert len(rec.steps) == len(task.steps)
        assert [s.step for s in rec.steps] == list(range(len(task.steps)))
        assert rec.steps[0].reuse_class == "first"
        assert {s.reuse_class for s in rec.steps[1:]} == {"all"}
    for body in fake.bodies:
        assert body["max_tokens"] == body["min_tokens"] >= 1
        assert body["ignore_eos"] is True and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert "tools" not in body  # the text protocol
    # Counters are deltas over the scored window only: warm-up traffic is excluded.
    assert record.prefix_cache_hit_ratio is not None and 0.5 < record.prefix_cache_hit_ratio < 1
    assert record.generation_tokens == sum(s.output_tokens for t in scored for s in t.steps)
    assert record.spec_drafts is None and record.preemptions is None  # not exported: None
    assert record.tasks_per_hour_low <= record.tasks_per_hour <= record.tasks_per_hour_high
    assert record.ttft_p50 is not None and record.energy_joules is None


def test_the_scripted_turn_replaces_what_the_model_generated() -> None:
    fake = FakeChat()
    settings = _settings(tasks=1, warmup_tasks=0, agents=1)
    _run(fake, settings)
    task = build_task_set(settings)[0]
    last = fake.bodies[-1]["messages"]
    assistant = [m["content"] for m in last if m["role"] == "assistant"]
    assert len(assistant) == len(task.steps) - 1
    assert task.steps[0].text in assistant[0] and "tok tok" not in " ".join(assistant)
    assert last[0] == fake.bodies[0]["messages"][0]  # the shared prefix never changes


@pytest.mark.parametrize("protocol", ["text", "tools"])
def test_live_mode_with_a_perfect_agent_succeeds(protocol: str) -> None:
    settings = _settings(mode="live", tool_protocol=protocol, warmup_tasks=0)
    fake = FakeChat(oracle_brain(build_task_set(settings), protocol))
    record = _run(fake, settings)
    assert record.successes == 8, [t.failure_reason for t in record.task_records]
    if protocol == "tools":
        assert fake.bodies[0]["tool_choice"] == "auto" and len(fake.bodies[0]["tools"]) == 14
    assert all("min_tokens" not in b and b["max_tokens"] == 160 for b in fake.bodies)


def test_live_mode_grades_a_wrong_agent_as_failed() -> None:
    settings = _settings(mode="live", warmup_tasks=0, tasks=4)
    record = _run(FakeChat(lambda body: ("I am done.", [])), settings)
    assert record.successes == 0
    assert {t.failure_reason for t in record.task_records} == {
        "final state differs from the oracle's"
    }
    assert all(len(t.steps) == 1 for t in record.task_records)


def test_live_mode_returns_bad_actions_as_errors_and_stops_at_the_step_limit() -> None:
    settings = _settings(mode="live", warmup_tasks=0, tasks=1, max_live_steps=3)
    fake = FakeChat(lambda body: ('```json\n{"tool": "launch_rocket", "arguments": {}}\n```', []))
    record = _run(fake, settings)
    (task,) = record.task_records
    assert task.failure_reason == "step_limit: 3 model calls without a final answer"
    assert len(task.steps) == 3
    results = [m["content"] for m in fake.bodies[-1]["messages"] if m["role"] == "user"][1:]
    assert results and all("unknown tool 'launch_rocket'" in r for r in results)


def test_should_stop_ends_the_run_with_a_partial_record_and_progress() -> None:
    seen: list[RunProgress] = []

    def stop() -> bool:
        return len(seen) > 3  # the window-open report, then three tasks

    record = _run(FakeChat(), _settings(agents=1), on_progress=seen.append, should_stop=stop)
    assert record.tasks == 3
    assert [p.tasks_done for p in seen] == [0, 1, 2, 3]
    assert all(p.tasks_total == 8 for p in seen)
    assert seen[-1].successes == 3 and seen[-1].tasks_per_hour > 0


def test_a_task_past_its_deadline_fails_and_keeps_its_steps() -> None:
    settings = _settings(tasks=1, warmup_tasks=0, agents=1, task_deadline_s=0.3)
    record = _run(FakeChat(delay_s=0.12), settings)
    (task,) = record.task_records
    assert not task.success
    assert (
        task.failure_reason
        == f"deadline: not finished within 0.3 s ({len(task.steps)} model calls answered)"
    )
    assert 1 <= len(task.steps) < len(build_task_set(settings)[0].steps)


def test_a_refused_request_fails_the_task_as_context_overflow() -> None:
    record = _run(FakeChat(status=400), _settings(tasks=2, warmup_tasks=0))
    # Why, with both numbers as vLLM gave them, per task.
    reason = "context_overflow: HTTP 400: " + VLLM_CONTEXT_MESSAGE
    assert [t.failure_reason for t in record.task_records] == [reason] * 2
    assert "2048 tokens" in reason and "2300 input tokens" in reason
    assert record.successes == 0 and record.tasks_per_hour == 0.0


def test_an_unreachable_server_is_one_clear_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(WorkloadError, match=r"cannot reach the vLLM server at http://fake:8000"):
        _run(refuse, _settings())


def test_a_server_that_dies_mid_run_is_a_workload_error() -> None:
    fake = FakeChat()

    async def dying(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions" and len(fake.bodies) >= 3:
            raise httpx.ReadError("connection reset", request=request)
        return await fake(request)

    with pytest.raises(WorkloadError, match="stopped answering after 3 answered requests") as err:
        _run(dying, _settings(agents=1))
    assert err.value.answered_requests == 3  # what tells "died at its first request" apart


class OneBlockShort(FakeChat):
    """A cache that drops the last block, like vLLM with an EAGLE/MTP drafter."""

    def _cached(self, prompt: str) -> int:
        return max(0, super()._cached(prompt) - BLOCK)


def test_block_size_comes_from_the_metrics_unless_given() -> None:
    settings = _settings(tasks=1, warmup_tasks=0, agents=1)
    record = _run(OneBlockShort(), settings)  # block 16 read from vllm:cache_config_info
    assert {s.reuse_class for s in record.task_records[0].steps[1:]} == {"one_block_short"}
    record = _run(OneBlockShort(), settings, block_size=4)  # the start's facts win
    assert {s.reuse_class for s in record.task_records[0].steps[1:]} == {"partial"}


def test_traces_replay_and_their_hash_follows_the_file(tmp_path: Path) -> None:
    line = json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    path = tmp_path / "a.jsonl"
    path.write_text(f"{line}\n{line}\n{line}\n")
    settings = _settings(traces=str(path), warmup_tasks=1)
    fake = FakeChat()
    record = _run(fake, settings)
    assert [(t.task_id, t.warmup) for t in record.task_records] == [
        ("trace-1", True), ("trace-2", False), ("trace-3", False),
    ]  # fmt: skip
    assert record.successes == 2 and fake.bodies[0]["max_tokens"] == 1  # "yo" is one token
    first = record.task_set_hash
    path.write_text(f"{line}\n{line}\n{line.replace('yo', 'hey')}\n")
    assert _run(FakeChat(), settings).task_set_hash != first
    with pytest.raises(WorkloadError, match="use --mode replay"):
        _run(FakeChat(), settings.model_copy(update={"mode": "live"}))


def test_a_completion_that_no_longer_fits_is_context_overflow_with_both_numbers() -> None:
    # vLLM 0.32 (CPU build, max_model_len 1536) shrank max_tokens to the context left and then
    # refused the replay's forced min_tokens; this body is what it answered in the fault suite.
    from tuner.workload.chat import RequestFailed

    body = (
        '{"error": {"message": "min_tokens must be less than or equal to max_tokens=2, got 33.",'
        ' "type": "BadRequestError", "param": null, "code": 400}}'
    )
    failed = RequestFailed(400, body)
    assert failed.context_overflow
    assert failed.reason == (
        "context_overflow: the model's context had 2 tokens left for a turn of 33; HTTP 400: "
        "min_tokens must be less than or equal to max_tokens=2, got 33."
    )
    other = RequestFailed(400, '{"error": {"message": "temperature must be >= 0"}}')
    assert not other.context_overflow and other.reason == "HTTP 400: temperature must be >= 0"


def test_the_run_says_what_it_does_through_warm_up_sweeps_and_scoring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tuner.workload.runner as runner

    monkeypatch.setattr(runner, "ACTIVITY_EVERY_S", 0.001)
    said: list[str] = []
    _run(FakeChat(), _settings(), on_activity=said.append)
    stages = [s.split(":", 1)[0] for s in said]
    # In order, each stage once it began: never back to an earlier one.
    order = ["warm-up", "warm-up sweeps", "scoring"]
    assert [order.index(s) for s in stages] == sorted(order.index(s) for s in stages), said
    assert set(stages) == set(order), said
    assert any(re.fullmatch(r"warm-up: [0-2] of 2 warm-up tasks done", s) for s in said), said
    assert any(s.startswith("warm-up sweeps: sweep 1 of at most 3") for s in said), said
    scoring = [s for s in said if s.startswith("scoring")]
    pattern = (
        r"scoring: (\d) of 8 tasks done, 2 agents, ([\d,]+) prompt tok/s and [\d,]+ gen tok/s "
        "so far"
    )
    rates = [re.fullmatch(pattern, s) for s in scoring]
    assert all(rates), scoring
    assert any(int(m.group(1)) > 0 and m.group(2) != "0" for m in rates if m), scoring


@pytest.mark.parametrize("engine_dead", [True, False])
def test_a_server_that_dies_in_the_warm_up_sweeps_says_how_many_requests_it_answered(
    engine_dead: bool,
) -> None:
    # The tiny hybrid's engine core on the CPU build dies at its first request: its API server
    # answers HTTP 500 for a moment, then may drop the connection, here in the warm-up's
    # sweeps. The count is what tells "died at its first request" (an infeasible config) from
    # a crash mid-run (`tuner.server.crashes.server_death`).
    fake = FakeChat()

    async def dying(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            if json.loads(request.content)["messages"][0]["content"].startswith("Session "):
                raise httpx.RemoteProtocolError("Server disconnected", request=request)
            if engine_dead:
                return httpx.Response(500, json={"error": "EngineCore encountered an issue"})
        return await fake(request)

    with pytest.raises(WorkloadError, match="stopped answering in the warm-up") as err:
        _run(dying, _settings(agents=1, warmup_tasks=1))
    # The fake saw only the warm-up task's requests (a sweep's is dropped before it).
    assert err.value.answered_requests == (0 if engine_dead else len(fake.bodies))
    assert engine_dead or len(fake.bodies) > 0
