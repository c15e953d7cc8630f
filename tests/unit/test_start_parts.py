"""The start's parts from real vLLM 0.26 logs (one H200, tests/assets/logs/README.md)."""

from __future__ import annotations

from pathlib import Path

from tuner.server.facts import parse_log, start_parts

LOGS = Path(__file__).resolve().parents[1] / "assets" / "logs"


def test_mtp_start_sums_both_compiled_models_and_both_profiling_runs() -> None:
    facts = parse_log((LOGS / "gpu-27b-mtp-compile-miss.log").read_text())
    parts = start_parts(facts)
    # 46.48 s (the target) + 11.39 s (the drafter); 2.51 + 0.40 s of profiling.
    assert parts["compile_s"] == 57.87
    assert parts["profile_s"] == 2.91
    assert parts["compile_cache"] == "miss"
    assert parts["load_s"] == 1.8 and parts["graphs_s"] == 4.0
    assert parts["engine_init_s"] == 72.63


def test_a_start_from_the_compile_cache_is_a_hit() -> None:
    parts = start_parts(parse_log((LOGS / "gpu-27b-compile-cache-hit.log").read_text()))
    assert parts["compile_cache"] == "hit"
    assert parts["compile_s"] == 13.14
    assert parts["profile_s"] == 92.85


def test_a_log_without_the_lines_names_no_parts() -> None:
    assert start_parts(parse_log("INFO starting\n")) == {}
