"""vLLM's /metrics: scrape, parse with prometheus_client, and take counter deltas.

The scored window is bracketed by two scrapes; `counter_deltas` turns them into the
diagnostics of docs/workload.md: prefix-cache hit ratio, speculative drafts and acceptance
(overall and per position), preemptions, prompt and generated tokens. A counter the server does
not export (speculation off, `--disable-log-stats`) gives None, never zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tuner.records import ServerCounters

__all__ = [
    "MetricsSnapshot",
    "ServerCounters",
    "counter_deltas",
    "parse_metrics",
    "scrape_metrics",
]

Labels = tuple[tuple[str, str], ...]

# Sample names keep their `_total` suffix (prometheus_client strips it only from family names).
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PROMPT_CACHED = "vllm:prompt_tokens_cached_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREEMPTIONS = "vllm:num_preemptions_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
CACHE_CONFIG = "vllm:cache_config_info"


@dataclass(frozen=True)
class MetricsSnapshot:
    """Every sample of one /metrics scrape, by sample name and label set."""

    samples: Mapping[str, Mapping[Labels, float]]

    def total(self, name: str) -> float | None:
        """The sum of sample `name` over its label sets (engines); None when absent."""
        series = self.samples.get(name)
        return None if series is None else sum(series.values())

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Sample `name` summed per value of `label` (e.g. per draft position)."""
        out: dict[str, float] = {}
        for labels, value in self.samples.get(name, {}).items():
            key = dict(labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + value
        return out

    def info_label(self, name: str, label: str) -> str | None:
        """A label of an info-style gauge such as `vllm:cache_config_info`."""
        for labels in self.samples.get(name, {}):
            value = dict(labels).get(label)
            if value is not None:
                return value
        return None

    @property
    def block_size(self) -> int | None:
        """The KV cache block size the server reports, if any."""
        value = self.info_label(CACHE_CONFIG, "block_size")
        return int(value) if value and value.isdigit() else None


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition format into a snapshot."""
    samples: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = float(sample.value)
    return MetricsSnapshot(samples)


async def scrape_metrics(client: httpx.AsyncClient, base_url: str) -> MetricsSnapshot | None:
    """GET {base_url}/metrics and parse it; None when the server exports no metrics.

    Transport errors propagate: a server that stopped answering is not "no metrics".
    """
    response = await client.get(f"{base_url}/metrics")
    if response.status_code != 200:
        return None
    return parse_metrics(response.text)


def _delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> int | None:
    end = after.total(name)
    if end is None:
        return None
    return round(end - (before.total(name) or 0.0))


def counter_deltas(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> ServerCounters:
    """The counters' growth between two scrapes (all None when either scrape is missing)."""
    if before is None or after is None:
        return ServerCounters()
    start = before.by_label(SPEC_ACCEPTED_PER_POS, "position")
    end = after.by_label(SPEC_ACCEPTED_PER_POS, "position")
    per_pos = (
        tuple(round(end[p] - start.get(p, 0.0)) for p in sorted(end, key=int)) if end else None
    )
    return ServerCounters(
        prefix_cache_queries=_delta(before, after, PREFIX_QUERIES),
        prefix_cache_hits=_delta(before, after, PREFIX_HITS),
        spec_drafts=_delta(before, after, SPEC_DRAFTS),
        spec_draft_tokens=_delta(before, after, SPEC_DRAFT_TOKENS),
        spec_accepted_tokens=_delta(before, after, SPEC_ACCEPTED),
        spec_accepted_per_pos=per_pos,
        preemptions=_delta(before, after, PREEMPTIONS),
        prompt_tokens=_delta(before, after, PROMPT_TOKENS),
        generation_tokens=_delta(before, after, GENERATION_TOKENS),
    )
