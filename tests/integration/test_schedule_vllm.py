"""A depth schedule relaunched on the real vLLM CPU build: it starts, and it acts by batch size.

Schedule (batch 1: depth 3, batch 2-8: depth 0) with n-gram on SmolLM2. One request alone is
drafted for; four requests started together, of equal length, run as a batch of 4 and get no
drafts. One real server start: about 40 s on 2 cores.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import httpx
import pytest

from tuner.metrics.prometheus import SPEC_DRAFTS, parse_metrics
from tuner.server import Launcher, ServerSpec, SpeculativeSpec
from tuner.testing import ServerPool

# Out of CI's core (tests/conftest.py SLOW_SUITES): `pytest -m extended` runs it.
pytestmark = [pytest.mark.vllm, pytest.mark.extended]

# Repetitive text: n-gram lookup finds matches, so depth 3 drafts at every decode step.
PROMPT = "count: one two three one two three one two three one two three one two three"


def _drafts(client: httpx.Client) -> float:
    return parse_metrics(client.get("/metrics").text).total(SPEC_DRAFTS) or 0.0


def _complete(client: httpx.Client) -> None:
    body = {"model": "s", "prompt": PROMPT, "max_tokens": 48, "ignore_eos": True, "temperature": 0}
    client.post("/v1/completions", json=body, timeout=300).raise_for_status()


def test_schedule_starts_on_the_cpu_build_and_drafts_only_at_batch_1(
    smollm2_path: Path, vllm_launcher: Launcher, vllm_pool: ServerPool
) -> None:
    vllm_pool.stop()  # one real server at a time on this machine
    spec = ServerSpec(
        model=str(smollm2_path),
        served_model_name="s",
        max_model_len=2048,
        max_num_seqs=8,
        kv_cache_memory_bytes=300_000_000,
        speculative=SpeculativeSpec(
            method="ngram",
            num_speculative_tokens=3,
            prompt_lookup_min=1,
            prompt_lookup_max=3,
            num_speculative_tokens_per_batch_size=[(1, 1, 3), (2, 8, 0)],
        ),
        env={"VLLM_USE_AOT_COMPILE": "0"},
    )
    with (
        vllm_launcher.launch(spec, timeout_s=600) as handle,
        httpx.Client(base_url=handle.base_url, timeout=300) as client,
    ):
        before = _drafts(client)
        _complete(client)
        alone = _drafts(client) - before
        before = _drafts(client)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: _complete(client), range(4)))
        batched = _drafts(client) - before
    assert alone >= 10  # about one draft per decode step of 48 tokens
    # A batch of 4 has depth 0; only steps where fewer than 2 requests ran (admission, the
    # tail) may draft: far fewer than one request alone.
    assert batched < alone / 2, (alone, batched)
