"""One streamed chat completion: text, tool calls, usage and timing.

The runner's only HTTP call per step. TTFT is measured to the first chunk carrying generated
text or a tool call; inter-token latency is the gap between such chunks (several tokens may ride
on one chunk under speculative decoding, as in `vllm bench serve`).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["ChatResult", "RequestFailed", "stream_chat"]


class RequestFailed(Exception):
    """The server answered a request with an error (HTTP status or an error event)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail

    @property
    def context_overflow(self) -> bool:
        """True when the prompt and max_tokens exceed the model's context.

        vLLM says so in two ways: a prompt longer than the context ("maximum context length is
        N tokens"), or, when only the forced completion does not fit, it shrinks max_tokens to
        the context left and then refuses the replay's min_tokens ("min_tokens must be less
        than or equal to max_tokens=LEFT, got NEEDED").
        """
        text = self.detail.lower()
        return (
            "context length" in text
            or "max_model_len" in text
            or "too long" in text
            or _SHRUNK_MAX_TOKENS.search(self.detail) is not None
        )

    @property
    def reason(self) -> str:
        """A task's failure reason: the class, then the status and vLLM's own message.

        vLLM's context-length message names both numbers (the model's maximum and the
        request's tokens), so they reach the stored task records and the CLI as vLLM said them.
        """
        message = " ".join(_error_message(self.detail).split())
        if len(message) > 300:
            message = message[:297] + "..."
        prefix = "context_overflow: " if self.context_overflow else ""
        shrunk = _SHRUNK_MAX_TOKENS.search(message)
        if shrunk is not None:
            prefix += f"the model's context had {shrunk[1]} tokens left for a turn of {shrunk[2]}; "
        return f"{prefix}HTTP {self.status}: {message}"


_SHRUNK_MAX_TOKENS = re.compile(
    r"min_tokens must be less than or equal to max_tokens=(\d+), got (\d+)"
)


def _error_message(detail: str) -> str:
    """vLLM's message from an error body (`{"error": {"message": ...}}`), else the body."""
    try:
        body = json.loads(detail)
    except ValueError:
        return detail
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return str(message) if message else detail


@dataclass
class ChatResult:
    """What one streamed completion returned and how long it took."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    completion_tokens: int = 0
    ttft_s: float | None = None
    latency_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)
    finish_reason: str | None = None


def _merge_tool_calls(calls: list[dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    """Accumulate streamed tool-call fragments (name once, arguments in pieces) by index."""
    for delta in deltas:
        index = delta.get("index", len(calls))
        while len(calls) <= index:
            calls.append({"id": None, "name": "", "arguments": ""})
        call = calls[index]
        if delta.get("id"):
            call["id"] = delta["id"]
        function = delta.get("function") or {}
        if function.get("name"):
            call["name"] += function["name"]
        if function.get("arguments"):
            call["arguments"] += function["arguments"]


async def stream_chat(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> ChatResult:
    """POST a streaming chat completion and collect it.

    Args:
        client: The shared client.
        url: The `/v1/chat/completions` URL.
        body: The request body; `stream` and `stream_options.include_usage` must be set.

    Raises:
        RequestFailed: The server refused the request or reported an error mid-stream.
        httpx.TransportError: The server could not be reached or dropped the connection.
    """
    result = ChatResult()
    parts: list[str] = []
    start = time.perf_counter()
    last = start
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            detail = (await response.aread()).decode("utf-8", "replace")
            raise RequestFailed(response.status_code, detail[:500])
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            now = time.perf_counter()
            if "error" in chunk:
                error = chunk["error"]
                message = error.get("message", str(error)) if isinstance(error, dict) else error
                raise RequestFailed(int(chunk.get("code") or 500), str(message)[:500])
            usage = chunk.get("usage")
            if usage:
                result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                result.completion_tokens = int(usage.get("completion_tokens") or 0)
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict) and details.get("cached_tokens") is not None:
                    result.cached_tokens = int(details["cached_tokens"])
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                text = delta.get("content")
                generated = text or delta.get("reasoning_content") or delta.get("reasoning")
                calls = delta.get("tool_calls")
                if generated or calls:
                    if result.ttft_s is None:
                        result.ttft_s = now - start
                    else:
                        result.gaps_s.append(now - last)
                    last = now
                if text:
                    parts.append(text)
                if calls:
                    _merge_tool_calls(result.tool_calls, calls)
                if choice.get("finish_reason"):
                    result.finish_reason = choice["finish_reason"]
    result.latency_s = time.perf_counter() - start
    result.content = "".join(parts)
    return result
