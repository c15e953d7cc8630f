"""The correctness probe: a fixed prompt set answered greedily, to compare servers token by token.

With greedy decoding, speculation is meant to be lossless: a candidate's answers should equal the
baseline's. Each trial's server answers the same `PROBE_PROMPTS` opening prompts of the workload
(temperature 0, `PROBE_MAX_TOKENS` output tokens at most, 4 in flight) and returns the output
token ids (`return_token_ids`; servers without it give whitespace words). Two baseline starts
never agree perfectly (batching and kernels differ), so `tuner.metrics.scoring.compare_outputs`
judges a candidate against that floor, not against 100%.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Final

import httpx

from tuner.workload.chat import RequestFailed
from tuner.workload.envs import ENVIRONMENTS
from tuner.workload.replay import opening_messages
from tuner.workload.runner import normalise_base_url
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import derive_seed, generate_task

__all__ = [
    "PROBE_MAX_TOKENS",
    "PROBE_PROMPTS",
    "ProbeResult",
    "probe_messages",
    "run_probe",
    "run_probe_sync",
    "try_probe",
]

PROBE_PROMPTS: Final = 16
PROBE_MAX_TOKENS: Final = 32
_IN_FLIGHT: Final = 4
# Probe prompts come from their own seed so they never repeat a scored or warm-up task.
_PROBE_SEED_OFFSET: Final = 4_243_000

Token = int | str


@dataclass(frozen=True)
class ProbeResult:
    """One server's greedy answers to the probe set, in prompt order."""

    outputs: tuple[tuple[Token, ...], ...]
    max_tokens: int
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (stored as a trial user attribute)."""
        return {
            "outputs": [list(o) for o in self.outputs],
            "max_tokens": self.max_tokens,
            "wall_s": round(self.wall_s, 3),
        }

    @classmethod
    def from_json(cls, data: Any) -> ProbeResult | None:
        """Back from `to_json`; None for anything else (an older study, a missing probe)."""
        if not isinstance(data, dict) or not isinstance(data.get("outputs"), list):
            return None
        return cls(
            outputs=tuple(tuple(o) for o in data["outputs"] if isinstance(o, list)),
            max_tokens=int(data.get("max_tokens") or 0),
            wall_s=float(data.get("wall_s") or 0.0),
        )


def probe_messages(
    settings: WorkloadSettings, prompts: int = PROBE_PROMPTS
) -> list[list[dict[str, Any]]]:
    """The probe's prompts: opening messages (shared prefix + instruction) of workload tasks."""
    base = settings.seed + _PROBE_SEED_OFFSET
    return [
        opening_messages(
            generate_task(
                ENVIRONMENTS[i % len(ENVIRONMENTS)].name,
                derive_seed(base, i),
                settings.shape,
                settings.tool_protocol,
            ),
            settings,
        )
        for i in range(prompts)
    ]


async def _answer(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    gate: asyncio.Semaphore,
) -> tuple[Token, ...]:
    async with gate:
        response = await client.post(url, json=body)
    if response.status_code != 200:
        raise RequestFailed(response.status_code, response.text[:500])
    choice = (response.json().get("choices") or [{}])[0]
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return tuple(int(i) for i in ids)
    content = (choice.get("message") or {}).get("content") or ""
    return tuple(str(content).split())


async def run_probe(
    client: httpx.AsyncClient,
    *,
    base_url: str,
    model: str,
    settings: WorkloadSettings,
    prompts: int = PROBE_PROMPTS,
    max_tokens: int = PROBE_MAX_TOKENS,
) -> ProbeResult:
    """Ask the server the probe set greedily and return its output tokens per prompt.

    Raises:
        RequestFailed: the server refused a probe request.
        httpx.HTTPError: the server could not be reached.
    """
    url = normalise_base_url(base_url) + "/v1/chat/completions"
    gate = asyncio.Semaphore(_IN_FLIGHT)
    t0 = time.monotonic()
    bodies = [
        {
            **settings.request_options,
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": 0,
            "return_token_ids": True,
        }
        for messages in probe_messages(settings, prompts)
    ]
    outputs = await asyncio.gather(*(_answer(client, url, b, gate) for b in bodies))
    return ProbeResult(tuple(outputs), max_tokens, time.monotonic() - t0)


def run_probe_sync(
    base_url: str, model: str, settings: WorkloadSettings, **kwargs: Any
) -> ProbeResult:
    """`run_probe` with its own client and event loop (for workers and scripts)."""

    async def main() -> ProbeResult:
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
            return await run_probe(
                client, base_url=base_url, model=model, settings=settings, **kwargs
            )

    return asyncio.run(main())


def try_probe(base_url: str, model: str, settings: WorkloadSettings) -> ProbeResult | None:
    """`run_probe_sync`, or None when the server refuses or fails it.

    A failed probe leaves the trial unjudged for correctness; it never fails the trial.
    """
    try:
        return run_probe_sync(base_url, model, settings)
    except (RequestFailed, httpx.HTTPError, ValueError):
        return None
