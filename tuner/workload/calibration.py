"""Calibration: how fast this server prefills and decodes, and which workload size fits.

The CPU boxes tuner runs on differ about 4x in speed (a Zen 3 without AVX-512 prefilled about
140-270 prompt tokens/s on one core where a Zen 4 did about 4x that, docs/workload.md), so
one fixed workload can take a minute on one box and over twelve on another. A study measures
its first server right after it is ready (`measure_speeds`: a few requests, seconds) and picks
the first of a list of sizings, prepared before the study by `tuner.study.preflight.calibration`,
whose estimated scored window fits the preset's target (`SizingPlan.choose`). The worker runs
that trial's scored workload at the chosen size, and the driver stores the choice in the study,
so every later trial uses the same one.

The cost model is deliberately plain: a sizing's scored window is estimated as its prompt tokens
that an ideal prefix cache cannot serve, divided by the prefill rate, plus its cached prompt
tokens times what one still costs (measured by extending a cached prompt), plus its forced
output tokens divided by the decode rate with the workload's agents as concurrent streams. It
is an estimate, and the line that reports it says so; the ETA after the first run is measured.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx

from tuner.errors import WorkloadError
from tuner.workload.chat import RequestFailed
from tuner.workload.runner import normalise_base_url
from tuner.workload.settings import WorkloadSettings
from tuner.workload.warmup import MAX_SWEEPS, sweep_tokens

__all__ = ["Calibration", "SizingOption", "SizingPlan", "Speeds", "measure_speeds"]

# The probe: prefill of a prompt as long as a CPU preset's shared prefix (prefill slows as the
# context grows, so a short prompt would flatter it), and decode at the workload's concurrency.
PREFILL_PROMPT_TOKENS = 1024
PREFILL_REQUESTS = 2
DECODE_OUTPUT_TOKENS = 32
EXTEND_TOKENS = 256

_WORDS = (
    "ledger", "transfer", "account", "memo", "amount", "warehouse", "stock", "bin", "archive",
    "log", "date", "order", "refund", "invoice", "ticket", "queue",
)  # fmt: skip


@dataclass(frozen=True)
class Speeds:
    """What the probe measured on one server.

    Attributes:
        prefill_tps: Prompt tokens per second of an uncached prompt (median of the requests).
        decode_tps: Output tokens per second over `streams` concurrent requests, in total.
        streams: Concurrent requests of the decode measurement (the workload's agents).
        probe_s: Wall seconds the probe took.
        cached_s_per_token: What a cached context token still costs a request that extends
            it (attention over it; on a CPU not nothing): the extension's time beyond its new
            tokens at `prefill_tps`, per cached token.
    """

    prefill_tps: float
    decode_tps: float
    streams: int
    probe_s: float = 0.0
    cached_s_per_token: float = 0.0


@dataclass(frozen=True)
class SizingOption:
    """One workload size a study may run, with what it asks of the server.

    Attributes:
        settings: The workload at this size.
        context_scale: Its contexts (shared prefix, tool outputs, context bound) over the
            preset's.
        prefill_tokens: Prompt tokens of its scored tasks an ideal prefix cache cannot serve.
        decode_tokens: Output tokens its scored tasks force.
        cached_tokens: Prompt tokens of its scored tasks the cache serves.
    """

    settings: WorkloadSettings
    context_scale: float
    prefill_tokens: int
    decode_tokens: int
    cached_tokens: int = 0

    def seconds(self, speeds: Speeds) -> float:
        """The estimated scored window at `speeds` (see the module doc)."""
        prefill = self.prefill_tokens / max(speeds.prefill_tps, 1e-9)
        decode = self.decode_tokens / max(speeds.decode_tps, 1e-9)
        return prefill + self.cached_tokens * speeds.cached_s_per_token + decode

    def describe(self) -> str:
        """What this sizing runs, e.g. "8 tasks, contexts <= 2,304 tokens"."""
        s = self.settings
        return f"{s.tasks} tasks, contexts <= {s.shape.max_context_tokens:,} tokens"


# The shape sweeps before each scored window (tuner.workload.warmup.warm_shapes) take at most
# this share of the target window at the calibrated speeds; at least one sweep runs. On a Zen 3
# in fp32 a sweep of the CPU preset was about 23 s against a 120 s window: 1 sweep, not 2-3.
WARMUP_SHARE = 0.25


def bounded_sweeps(
    settings: WorkloadSettings, speeds: Speeds, window_s: float
) -> tuple[int, float]:
    """(shape sweeps at most, one sweep's estimated seconds) for `settings` at `speeds`."""
    prompt, output = sweep_tokens(settings)
    one = prompt / max(speeds.prefill_tps, 1e-9) + output / max(speeds.decode_tps, 1e-9)
    fits = int(WARMUP_SHARE * window_s // one) if one > 0 else MAX_SWEEPS
    return max(1, min(settings.warmup_max_sweeps, fits)), one


@dataclass(frozen=True)
class SizingPlan:
    """The sizings a study may choose from, largest (the preset's) first, and its target."""

    options: tuple[SizingOption, ...]
    window_s: float

    def choose(self, speeds: Speeds) -> SizingOption:
        """The first option whose estimated window fits the target, else the smallest."""
        for option in self.options:
            if option.seconds(speeds) <= self.window_s:
                return option
        return self.options[-1]

    def calibrate(self, speeds: Speeds, trial_number: int, startup_s: float = 0.0) -> Calibration:
        """The choice at `speeds`, as the record the study stores."""
        chosen = self.choose(speeds)
        preset = self.options[0]
        settings = chosen.settings
        sweeps, sweep_s = bounded_sweeps(settings, speeds, self.window_s)
        if settings.warmup_tasks > 0 and sweeps < settings.warmup_max_sweeps:
            settings = settings.model_copy(update={"warmup_max_sweeps": sweeps})
        return Calibration(
            trial_number=trial_number,
            prefill_tps=speeds.prefill_tps,
            decode_tps=speeds.decode_tps,
            streams=speeds.streams,
            window_s=self.window_s,
            cached_s_per_token=speeds.cached_s_per_token,
            preset_estimate_s=preset.seconds(speeds),
            estimate_s=chosen.seconds(speeds),
            scaled=chosen is not preset,
            context_scale=chosen.context_scale,
            preset_sizing=preset.describe(),
            sizing=chosen.describe(),
            workload=settings.model_dump(mode="json"),
            startup_s=startup_s,
            sweep_s=sweep_s,
        )


@dataclass(frozen=True)
class Calibration:
    """A study's calibration: the speeds measured on its first server and the sizing chosen.

    Stored as the study attribute `calibration` (`to_json`); every trial of the study, after a
    resume too, runs `workload`.
    """

    trial_number: int
    prefill_tps: float
    decode_tps: float
    streams: int
    window_s: float
    cached_s_per_token: float
    preset_estimate_s: float
    estimate_s: float
    scaled: bool
    context_scale: float
    preset_sizing: str
    sizing: str
    workload: dict[str, Any]
    startup_s: float = 0.0  # the calibrated server's start, for the estimate
    sweep_s: float = 0.0  # one warm-up shape sweep at the calibrated speeds, estimated

    @property
    def settings(self) -> WorkloadSettings:
        """The workload every trial of the study runs."""
        return WorkloadSettings.model_validate(self.workload)

    def to_json(self) -> dict[str, Any]:
        """The study attribute's value."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        """Read the study attribute back."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def line(self) -> str:
        """The one line that says what calibration did."""
        return self._sizing_line() + self._sweeps_line()

    def _sweeps_line(self) -> str:
        most = self.settings.warmup_max_sweeps
        if most >= MAX_SWEEPS or self.settings.warmup_tasks == 0:
            return ""
        return (
            f"; warm-up shape sweeps at most {most} (one is about {self.sweep_s:.0f} s here, "
            f"against {WARMUP_SHARE:.0%} of the window)"
        )

    def _sizing_line(self) -> str:
        head = (
            f"calibrated on trial {self.trial_number}: prefill {self.prefill_tps:,.0f} tok/s, "
            f"decode {self.decode_tps:,.1f} tok/s ({self.streams} streams): "
        )
        window = f"{self.window_s:.0f} s"
        if not self.scaled:
            return (
                head + f"the preset's workload ({self.preset_sizing}) fits the {window} window "
                f"(about {self.estimate_s:.0f} s, an estimate): kept"
            )
        over = (
            f"; still about {self.estimate_s:.0f} s, the smallest sizing"
            if self.estimate_s > self.window_s
            else f" (about {self.estimate_s:.0f} s, an estimate)"
        )
        return (
            head + f"workload scaled to {self.sizing} to fit a {window} window{over}; the "
            f"preset's ({self.preset_sizing}) would take about {self.preset_estimate_s:.0f} s "
            "(--no-calibrate keeps it)"
        )


def _prompt(tokens: int) -> str:
    # One common word is about one token; the nonce first, so no prefix is ever cached.
    words = [_WORDS[(i * 7 + i // 16) % len(_WORDS)] for i in range(max(1, tokens - 8))]
    return f"Probe {secrets.token_hex(8)}. " + " ".join(words)


async def _post(
    client: httpx.AsyncClient, url: str, model: str, prompt: str, output_tokens: int
) -> tuple[dict[str, Any], float]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    t0 = time.perf_counter()
    response = await client.post(url, json=body)
    if response.status_code != 200:
        raise RequestFailed(response.status_code, response.text[:500])
    return response.json().get("usage") or {}, time.perf_counter() - t0


def _split(usage: dict[str, Any]) -> tuple[int, int]:
    """(uncached, cached) prompt tokens of an answer."""
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return max(int(usage.get("prompt_tokens") or 0) - cached, 1), cached


async def _measure(client: httpx.AsyncClient, url: str, model: str, streams: int) -> Speeds:
    t0 = time.perf_counter()
    rates = []
    prompt = ""
    for _ in range(PREFILL_REQUESTS):
        prompt = _prompt(PREFILL_PROMPT_TOKENS)
        usage, wall = await _post(client, url, model, prompt, 1)
        rates.append(_split(usage)[0] / max(wall, 1e-6))
    prefill = statistics.median(rates)
    # The last prompt again, a quarter longer: its cached part still costs attention.
    usage, wall = await _post(client, url, model, prompt + " " + _prompt(EXTEND_TOKENS), 1)
    uncached, cached = _split(usage)
    per_cached = max(wall - uncached / prefill, 0.0) / cached if cached else 0.0
    d0 = time.perf_counter()
    answers = await asyncio.gather(
        *(_post(client, url, model, _prompt(24), DECODE_OUTPUT_TOKENS) for _ in range(streams))
    )
    decode_wall = time.perf_counter() - d0
    written = sum(int(usage.get("completion_tokens") or 0) for usage, _ in answers)
    return Speeds(
        prefill_tps=prefill,
        decode_tps=written / max(decode_wall, 1e-6),
        streams=streams,
        probe_s=time.perf_counter() - t0,
        cached_s_per_token=per_cached,
    )


def measure_speeds(base_url: str, model: str, *, streams: int, timeout_s: float = 600.0) -> Speeds:
    """Measure prefill and decode tokens/s on a running server (a few requests).

    Raises:
        WorkloadError: the server is unreachable or refuses the probe's requests.
    """
    url = f"{normalise_base_url(base_url)}/v1/chat/completions"

    async def main() -> Speeds:
        limits = httpx.Limits(max_connections=streams + 2)
        async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
            return await _measure(client, url, model, streams)

    try:
        return asyncio.run(main())
    except httpx.TransportError as exc:
        raise WorkloadError(
            f"cannot reach the vLLM server at {base_url} for the calibration probe "
            f"({type(exc).__name__})"
        ) from None
    except RequestFailed as exc:
        raise WorkloadError(f"the server refused a calibration probe request: {exc}") from None
