"""The suite shape in SmolLM2 tokens matches docs/workload.md (and the CPU shape fits)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tuner.workload import SuiteShape, SuiteStats, TokenCounter, WorkloadSettings, describe_suite


@pytest.fixture(scope="module")
def smollm2_tokens(smollm2_path: Path) -> TokenCounter:
    return TokenCounter.load(str(smollm2_path))


@pytest.mark.parametrize("protocol", ["tools", "text"])
def test_default_shape_is_the_realistic_agent_shape(
    smollm2_tokens: TokenCounter, protocol: str
) -> None:
    settings = WorkloadSettings(tool_protocol=protocol)  # 192 tasks, the realistic shape
    stats = describe_suite(settings, smollm2_tokens, block_size=16)
    assert not stats.estimated and stats.tasks == 192
    assert 3000 <= stats.shared_prefix_tokens <= 5000
    assert stats.steps.min >= 8 and stats.steps.max <= 24 and 10 <= stats.steps.median <= 14
    # Tool outputs: lognormal, median ~150, p90 ~500, p99 ~1,500 tokens.
    assert 100 <= stats.tool_output_tokens.median <= 200
    assert 350 <= stats.tool_output_tokens.p90 <= 650
    assert 900 <= stats.tool_output_tokens.p99 <= 2000
    # Assistant turns: tool calls of 60-120 tokens, some plans/summaries of 300-600.
    assert 60 <= stats.call_turn_tokens.median <= 120
    assert stats.call_turn_tokens.p95 <= 130
    assert stats.long_turn_tokens.count >= 20
    assert 300 <= stats.long_turn_tokens.median <= 600
    # Prompts grow by 130-550 tokens per step (median); final context ~8k, at most 14k.
    assert 130 <= stats.prompt_growth_tokens.median <= 550
    assert 6000 <= stats.final_context_tokens.median <= 10000
    assert stats.final_context_tokens.max <= 14000
    assert stats.ideal_cache_hit_ratio > 0.93


def test_cpu_shape_fits_smollm2_on_two_cores(smollm2_tokens: TokenCounter) -> None:
    settings = WorkloadSettings(tool_protocol="text", shape=SuiteShape.cpu_small())
    stats: SuiteStats = describe_suite(settings, smollm2_tokens, block_size=128)
    # Well above the 128-token CPU block, so prefix caching matters.
    assert 600 <= stats.shared_prefix_tokens <= 1200
    assert stats.shared_prefix_tokens // 128 >= 5
    assert stats.steps.min == 3 and stats.steps.max == 6
    assert stats.call_turn_tokens.max <= 48 and stats.call_turn_tokens.median >= 16
    assert stats.tool_output_tokens.median <= 150
    assert stats.final_context_tokens.max <= 3072  # far inside SmolLM2's 8k window
    assert stats.ideal_replay_hit_ratio > 0.8


def test_the_estimate_is_flagged_and_close_to_real_counts(smollm2_tokens: TokenCounter) -> None:
    # ChatML: <|im_start|>, the role, a newline, then <|im_end|> and a newline around content.
    assert smollm2_tokens.message_overhead == 5
    assert TokenCounter.load(smollm2_tokens.name) is smollm2_tokens  # loaded once per process
    settings = WorkloadSettings(tasks=24, tool_protocol="text", shape=SuiteShape.cpu_small())
    real = describe_suite(settings, smollm2_tokens, block_size=128)
    estimated = describe_suite(settings, TokenCounter.estimate(), block_size=128)
    assert estimated.estimated and estimated.tokenizer == "estimate"
    ratio = estimated.final_context_tokens.median / real.final_context_tokens.median
    assert 0.85 < ratio < 1.15


def test_shape_validation_and_names() -> None:
    assert SuiteShape.named("default") == SuiteShape()
    assert SuiteShape.named("cpu") == SuiteShape.cpu_small()
    with pytest.raises(ValueError, match="unknown shape"):
        SuiteShape.named("gpu")
    with pytest.raises(ValidationError, match="steps_min must not exceed"):
        SuiteShape(steps_min=10, steps_max=8)
    with pytest.raises(ValidationError, match="below tool_output_p90"):
        SuiteShape(tool_output_median_tokens=600)
    with pytest.raises(ValidationError, match="no room after the shared prefix"):
        SuiteShape(shared_prefix_tokens=10000)
    with pytest.raises(ValidationError, match="Extra inputs"):
        WorkloadSettings(agent=3)  # type: ignore[call-arg]
    settings = WorkloadSettings()
    with pytest.raises(ValidationError, match="frozen"):
        settings.tasks = 3  # type: ignore[misc]
    assert settings.shape == SuiteShape.default() and settings.warmup_seed != settings.seed
