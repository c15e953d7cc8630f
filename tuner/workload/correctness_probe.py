"""The correctness probe: a fixed prompt set answered greedily, to compare servers token by token.

With greedy decoding, speculation is meant to be lossless: a candidate's answers should equal the
baseline's. Each trial's server answers the same `PROBE_PROMPTS` opening prompts of the workload
(temperature 0, `PROBE_MAX_TOKENS` output tokens at most, `PROBE_IN_FLIGHT` at a time) and
returns the output token ids (`return_token_ids`; servers without it give whitespace words) and,
at every position, the top `PROBE_TOP_LOGPROBS` tokens with their log-probabilities (`logprobs`,
`top_logprobs`, and vLLM's `return_tokens_as_token_ids` so they are ids too). Rounding can flip
a near-tie between two tokens, so `tuner.metrics.correctness.judge_outputs` judges the margin
at each prompt's first divergence rather than the token match alone.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Final

import httpx

from tuner.metrics.correctness import DEFAULT_TIE_MARGIN, ProbeAnswers, TopLogprobs
from tuner.workload.chat import RequestFailed
from tuner.workload.envs import ENVIRONMENTS
from tuner.workload.replay import opening_messages
from tuner.workload.runner import normalise_base_url
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import derive_seed, generate_task

__all__ = [
    "PROBE_IN_FLIGHT",
    "PROBE_MAX_TOKENS",
    "PROBE_PROMPTS",
    "PROBE_TOP_LOGPROBS",
    "ProbeResult",
    "probe_messages",
    "run_probe",
    "run_probe_sync",
    "try_probe",
]

PROBE_PROMPTS: Final = 16
PROBE_MAX_TOKENS: Final = 32
# One prompt at a time: on the CPU build, which prompts share a batch changes the greedy answers
# (near-ties flip), and 4 in flight gave the baseline different answers from one start to the
# next while 1 at a time gave identical ones (docs/correctness-probe.md, from
# benchmarks/probe_check.py at 95daa70). It costs about 20 s more per trial on 2 cores (16 x 32
# tokens).
PROBE_IN_FLIGHT: Final = 1
# Top-k log-probabilities per output position: enough to find the candidate's token among the
# baseline's near-ties (outside them the margin is a lower bound, which is all a clear change
# needs).
PROBE_TOP_LOGPROBS: Final = 3
# Probe prompts come from their own seed so they never repeat a scored or warm-up task.
_PROBE_SEED_OFFSET: Final = 4_243_000

Token = int | str


@dataclass(frozen=True)
class ProbeResult:
    """One server's greedy answers to the probe set, in prompt order."""

    # The answers; they carry their log-probabilities (`ProbeAnswers.top`) when the server
    # gave them, and the near-tie threshold in force (`ProbeAnswers.tie_margin`).
    outputs: ProbeAnswers
    max_tokens: int
    wall_s: float
    in_flight: int = PROBE_IN_FLIGHT

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (stored as a trial user attribute)."""
        out: dict[str, Any] = {
            "outputs": [list(o) for o in self.outputs],
            "max_tokens": self.max_tokens,
            "wall_s": round(self.wall_s, 3),
            "in_flight": self.in_flight,
            "tie_margin": self.outputs.tie_margin,
        }
        if self.outputs.top is not None:
            out["top_logprobs"] = [
                [[[tok, round(lp, 4)] for tok, lp in pos] for pos in answer]
                for answer in self.outputs.top
            ]
        return out

    @classmethod
    def from_json(cls, data: Any) -> ProbeResult | None:
        """Back from `to_json`; None for anything else (an older study, a missing probe)."""
        if not isinstance(data, dict) or not isinstance(data.get("outputs"), list):
            return None
        outputs = [o for o in data["outputs"] if isinstance(o, list)]
        top = _top_from_json(data.get("top_logprobs"), len(outputs))
        margin = data.get("tie_margin")
        return cls(
            outputs=ProbeAnswers(
                outputs,
                top,
                float(margin) if isinstance(margin, int | float) else DEFAULT_TIE_MARGIN,
            ),
            max_tokens=int(data.get("max_tokens") or 0),
            wall_s=float(data.get("wall_s") or 0.0),
            # Probes stored before this field existed ran 4 at a time.
            in_flight=int(data.get("in_flight") or 4),
        )


def _top_from_json(data: Any, prompts: int) -> TopLogprobs | None:
    """The stored top-k lists, or None when absent or not of the stored shape."""
    if not isinstance(data, list) or len(data) != prompts:
        return None
    try:
        return tuple(
            tuple(tuple((_token(tok), float(lp)) for tok, lp in pos) for pos in answer)
            for answer in data
        )
    except (TypeError, ValueError):
        return None


def _token(value: Any) -> Token:
    return value if isinstance(value, int | str) else str(value)


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


_LOGPROB_FIELDS: Final = ("logprobs", "top_logprobs", "return_tokens_as_token_ids")

Position = tuple[tuple[Token, float], ...]


async def _answer(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    gate: asyncio.Semaphore,
) -> tuple[tuple[Token, ...], tuple[Position, ...] | None]:
    async with gate:
        response = await client.post(url, json=body)
        if response.status_code == 400:
            # A server that refuses log-probabilities still gets its answers compared by ids.
            plain = {k: v for k, v in body.items() if k not in _LOGPROB_FIELDS}
            response = await client.post(url, json=plain)
    if response.status_code != 200:
        raise RequestFailed(response.status_code, response.text[:500])
    choice = (response.json().get("choices") or [{}])[0]
    top = _positions(choice.get("logprobs"))
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return tuple(int(i) for i in ids), top
    content = (choice.get("message") or {}).get("content") or ""
    return tuple(str(content).split()), None


def _positions(logprobs: Any) -> tuple[Position, ...] | None:
    """Per output position, the top-k (token id, log-probability) pairs, best first.

    vLLM names tokens "token_id:N" under `return_tokens_as_token_ids`; any other name is kept
    as text. None when the answer carries no log-probabilities.
    """
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        return None
    out = []
    for entry in content:
        listed = entry.get("top_logprobs") if isinstance(entry, dict) else None
        if not isinstance(listed, list) or not listed:
            return None
        pairs = [(_token_id(e.get("token")), float(e.get("logprob"))) for e in listed]
        pairs.sort(key=lambda p: -p[1])
        out.append(tuple(pairs))
    return tuple(out)


def _token_id(name: Any) -> Token:
    text = str(name)
    if text.startswith("token_id:"):
        try:
            return int(text.removeprefix("token_id:"))
        except ValueError:
            return text
    return text


async def run_probe(
    client: httpx.AsyncClient,
    *,
    base_url: str,
    model: str,
    settings: WorkloadSettings,
    prompts: int = PROBE_PROMPTS,
    max_tokens: int = PROBE_MAX_TOKENS,
    in_flight: int = PROBE_IN_FLIGHT,
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> ProbeResult:
    """Ask the server the probe set greedily and return its output tokens per prompt.

    Args:
        client: The HTTP client.
        base_url: The server.
        model: The served model name.
        settings: The workload whose opening prompts make the probe set.
        prompts: How many prompts.
        max_tokens: Output tokens per prompt at most.
        in_flight: Prompts in flight at once.
        tie_margin: The near-tie threshold stored with the answers (the study's default).

    Raises:
        RequestFailed: the server refused a probe request.
        httpx.HTTPError: the server could not be reached.
    """
    url = normalise_base_url(base_url) + "/v1/chat/completions"
    gate = asyncio.Semaphore(in_flight)
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
            "logprobs": True,
            "top_logprobs": PROBE_TOP_LOGPROBS,
            "return_tokens_as_token_ids": True,
        }
        for messages in probe_messages(settings, prompts)
    ]
    answers = await asyncio.gather(*(_answer(client, url, b, gate) for b in bodies))
    tops = [top for _, top in answers]
    # Log-probabilities count only when every answer has them, one list per token.
    complete = all(top is not None and len(top) == len(ids) for ids, top in answers)
    outputs = ProbeAnswers(
        (ids for ids, _ in answers),
        tuple(t for t in tops if t is not None) if complete else None,
        tie_margin,
    )
    return ProbeResult(outputs, max_tokens, time.monotonic() - t0, in_flight)


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
