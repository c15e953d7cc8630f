"""/metrics deltas on text captured from a real vLLM 0.32 CPU server (SmolLM2, ngram depth 3)."""

from __future__ import annotations

import pytest

from tuner.metrics import counter_deltas, parse_metrics
from tuner.metrics.prometheus import ServerCounters

LABELS = 'engine="0",model_name="smollm2"'


def capture(
    *, queries: float, hits: float, drafts: float, draft_tokens: float, accepted: float,
    per_pos: tuple[float, float, float], preemptions: float, prompt: float, generated: float,
    caching: bool = True,
) -> str:  # fmt: skip
    """The exposition text vLLM 0.32 wrote (format, HELP/TYPE lines and `_created` samples
    copied from a capture), with the counter values given."""
    pos = "\n".join(
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    )
    return f"""\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{_block_size_resolved="True",block_size="128",cache_dtype="auto",\
enable_prefix_caching="{caching}",engine="0",gpu_memory_utilization="0.92",\
kv_cache_size_tokens="43392",num_gpu_blocks="339"}} 1.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{LABELS}}} {drafts}
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{{{LABELS}}} 1.795947143601728e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} {draft_tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
{pos}
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{{LABELS}}} {queries}
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{{LABELS}}} {hits}
# HELP vllm:prefix_cache_hits_created Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{{{LABELS}}} 1.795947143602317e+09
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{LABELS}}} {preemptions}
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{{LABELS}}} {prompt}
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{{{LABELS},source="local_compute"}} {prompt - hits}
vllm:prompt_tokens_by_source_total{{{LABELS},source="local_cache_hit"}} {hits}
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{LABELS}}} {generated}
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.001",model_name="smollm2"}} 0.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="smollm2"}} 49.0
vllm:time_to_first_token_seconds_count{{{LABELS}}} 49.0
vllm:time_to_first_token_seconds_sum{{{LABELS}}} 40.2
"""


BEFORE = capture(
    queries=39107.0, hits=32896.0, drafts=64.0, draft_tokens=192.0, accepted=113.0,
    per_pos=(47.0, 38.0, 28.0), preemptions=0.0, prompt=39107.0, generated=1198.0,
)  # fmt: skip
AFTER = capture(
    queries=51220.0, hits=42496.0, drafts=692.0, draft_tokens=2076.0, accepted=1425.0,
    per_pos=(546.0, 478.0, 401.0), preemptions=2.0, prompt=51220.0, generated=1490.0,
)  # fmt: skip


def test_parse_keeps_sample_names_with_their_total_suffix() -> None:
    snapshot = parse_metrics(BEFORE)
    assert snapshot.total("vllm:prefix_cache_queries_total") == 39107.0
    assert snapshot.total("vllm:prefix_cache_queries") is None  # the family name is not a sample
    assert snapshot.by_label("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position") == {
        "0": 47.0, "1": 38.0, "2": 28.0,
    }  # fmt: skip
    assert snapshot.block_size == 128
    assert snapshot.total("vllm:time_to_first_token_seconds_count") == 49.0


def test_deltas_over_the_window() -> None:
    delta = counter_deltas(parse_metrics(BEFORE), parse_metrics(AFTER))
    assert delta == ServerCounters(
        prefix_cache_queries=12113,
        prefix_cache_hits=9600,
        spec_drafts=628,
        spec_draft_tokens=1884,
        spec_accepted_tokens=1312,
        spec_accepted_per_pos=(499, 440, 373),
        preemptions=2,
        prompt_tokens=12113,
        generation_tokens=292,
    )
    assert delta.prefix_cache_hit_ratio == pytest.approx(9600 / 12113)
    assert delta.acceptance_rate == pytest.approx(1312 / 1884)
    assert delta.mean_acceptance_length == pytest.approx(1 + 1312 / 628)


def test_prefix_caching_off_is_a_measured_zero() -> None:
    def quiet(prompt: float, generated: float) -> str:
        return capture(
            queries=0.0, hits=0.0, drafts=0.0, draft_tokens=0.0, accepted=0.0,
            per_pos=(0.0, 0.0, 0.0), preemptions=0.0, prompt=prompt, generated=generated,
            caching=False,
        )  # fmt: skip

    before, after = quiet(1000.0, 10.0), quiet(9000.0, 90.0)
    delta = counter_deltas(parse_metrics(before), parse_metrics(after))
    assert delta.prefix_cache_queries == 0
    assert delta.prefix_cache_hit_ratio == 0.0
    assert delta.acceptance_rate is None  # no draft tokens: undefined, not zero
    idle = counter_deltas(parse_metrics(after), parse_metrics(after))
    assert idle.prefix_cache_hit_ratio is None  # nothing was served in the window


def test_counters_a_server_does_not_export_are_none() -> None:
    plain = "\n".join(
        line for line in AFTER.splitlines() if "spec_decode" not in line
    )  # a server without speculation
    delta = counter_deltas(parse_metrics(BEFORE), parse_metrics(plain))
    assert delta.spec_drafts is None and delta.spec_accepted_per_pos is None
    assert delta.acceptance_rate is None and delta.mean_acceptance_length is None
    assert delta.preemptions == 2
    assert counter_deltas(None, parse_metrics(AFTER)) == ServerCounters()
