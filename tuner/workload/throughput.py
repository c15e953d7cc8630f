"""The plain benchmark beside the agent score: output tokens/s at a fixed number of streams.

Every request forces the same output length (`max_tokens` = `min_tokens`, `ignore_eos`) and
opens with a random nonce, so the prefix cache cannot help: this is the number a speculative
config's advertisement quotes, kept to show how far it is from tasks/hour.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from typing import Any

import httpx

from tuner.errors import WorkloadError
from tuner.records import ThroughputRecord
from tuner.workload.chat import RequestFailed
from tuner.workload.runner import normalise_base_url

__all__ = ["run_throughput", "run_throughput_sync"]

_WORDS = (
    "the", "quarterly", "ledger", "shows", "every", "transfer", "between", "accounts", "with",
    "its", "memo", "and", "amount", "while", "warehouse", "moves", "stock", "bins", "archive",
    "keeps", "old", "logs", "by", "date",
)  # fmt: skip


def _prompt(prompt_tokens: int, rng: random.Random) -> str:
    # One common word is about one token; the nonce rides in the system message.
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, prompt_tokens - 8)))


async def _one(
    client: httpx.AsyncClient, url: str, model: str, output_tokens: int, prompt: str
) -> int:
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": f"Request {secrets.token_hex(8)}."},
            {"role": "user", "content": prompt},
        ],
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    response = await client.post(url, json=body)
    if response.status_code != 200:
        raise RequestFailed(response.status_code, response.text[:500])
    usage = response.json().get("usage") or {}
    return int(usage.get("completion_tokens") or 0)


async def run_throughput(
    client: httpx.AsyncClient,
    *,
    base_url: str,
    model: str,
    streams: int,
    requests: int,
    output_tokens: int,
    prompt_tokens: int,
) -> ThroughputRecord:
    """Send `requests` requests over `streams` concurrent streams; measure output tokens/s.

    Args:
        client: The shared client.
        base_url: The server, e.g. `http://127.0.0.1:8000`.
        model: The served model name.
        streams: Requests in flight at once.
        requests: Requests in total.
        output_tokens: Forced output length of each request.
        prompt_tokens: About this many prompt tokens per request.

    Raises:
        WorkloadError: The server is unreachable or refuses the requests.
    """
    url = f"{normalise_base_url(base_url)}/v1/chat/completions"
    rng = random.Random(0)
    prompts = [_prompt(prompt_tokens, rng) for _ in range(requests)]
    queue = list(reversed(prompts))
    produced: list[int] = []

    async def stream() -> None:
        while queue:
            produced.append(await _one(client, url, model, output_tokens, queue.pop()))

    start = time.perf_counter()
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(streams):
                group.create_task(stream())
    except ExceptionGroup as errors:
        first = errors.exceptions[0]
        if isinstance(first, httpx.TransportError):
            raise WorkloadError(
                f"cannot reach the vLLM server at {base_url} ({type(first).__name__}): "
                "start it or fix --url"
            ) from None
        if isinstance(first, RequestFailed):
            raise WorkloadError(f"the server refused a benchmark request: {first}") from None
        raise first from None
    wall = time.perf_counter() - start
    return ThroughputRecord(
        streams=streams, requests=len(produced), output_tokens=sum(produced), wall_s=wall
    )


def run_throughput_sync(
    base_url: str, model: str, *, streams: int, requests: int, output_tokens: int = 128,
    prompt_tokens: int = 256, timeout_s: float = 600.0,
) -> ThroughputRecord:  # fmt: skip
    """`run_throughput` with its own client and event loop."""

    async def main() -> ThroughputRecord:
        limits = httpx.Limits(max_connections=streams + 2)
        async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
            return await run_throughput(
                client, base_url=base_url, model=model, streams=streams, requests=requests,
                output_tokens=output_tokens, prompt_tokens=prompt_tokens,
            )  # fmt: skip

    return asyncio.run(main())
