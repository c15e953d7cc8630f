"""What export, report and the GPU summary say of a real H200 study with prefix caching on.

`tests/assets/qwen3.8-27b-shape-h200.db` is the SQLite file of issue 35's study, as
`tuner optimize --model qwen3.8-27b-shape --gpu h200` wrote it on one H200 with vLLM 0.26.0
(benchmarks/data/qwen3.8-27b-shape-h200-prefix-caching.json summarises it): no speculation
(two starts), n-gram depth 1 and MTP depth 1, on dummy weights. Each test reads a copy.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from tuner.results import choose_export, load_results, render_export
from tuner.results.report import summary_lines
from tuner.results.words import DUMMY_WEIGHTS_LINE

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "tests" / "assets" / "qwen3.8-27b-shape-h200.db"
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_study_summary  # noqa: E402


@pytest.fixture
def url(tmp_path: Path) -> str:
    db = tmp_path / "study.db"
    shutil.copy(ASSET, db)
    return f"sqlite:///{db}"


def test_trials_carry_reuse_block_mode_and_dummy_weights(url: str) -> None:
    rows = {t.number: t for t in load_results(url).trials}
    mtp = rows[2]
    assert mtp.method == "mtp" and mtp.dummy_weights
    assert (mtp.block_size, mtp.mamba_cache_mode) == (416, "align")
    # MTP never reused a whole previous prompt; no speculation did on most steps.
    assert mtp.reuse_line() == (
        "reuse all/short/none 0/133/11 of 144 scored steps (block 416, mamba cache align), "
        "102 preemptions"
    )
    assert rows[0].reuse_line().startswith("reuse all/short/none 96/32/16 of 144 scored steps")


def test_export_evidence_names_reuse_and_dummy_weights(url: str) -> None:
    choice = choose_export(load_results(url))
    text = render_export(choice)
    assert "# this config: reuse all/short/none 96/32/16 of 144 scored steps" in text
    assert f"# {DUMMY_WEIGHTS_LINE}\n" in text
    doc = json.loads(render_export(choice, "json"))
    measured = doc["measured"]
    assert measured["reuse_steps"] == {"all": 96, "short": 32, "none": 16, "of": 144}
    assert (measured["block_size"], measured["mamba_cache_mode"]) == (400, "align")
    assert measured["dummy_weights"] is True


def test_report_says_acceptance_is_not_measured(url: str) -> None:
    lines = summary_lines(load_results(url))
    assert f"Weights: {DUMMY_WEIGHTS_LINE}" in lines


def test_summary_table_has_every_run_and_the_published_ratios(url: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    doc = gpu_study_summary.summarise(url, logs)
    rows = {r["config"]: r["runs"] for r in doc["table"]}
    assert [r["trial"] for r in rows["none"]] == [0, 3]
    assert rows["mtp"][0]["reuse_all_short_none"] == [0, 133, 11]
    assert rows["mtp"][0]["kv_cache_tokens"] == 34_105
    # From cached_tokens per scored step, not from vLLM's prefix-cache counters.
    assert rows["none"][0]["prompt_tokens_from_cache_pct"] == pytest.approx(60.8, abs=0.05)
    cmp = doc["comparison"]
    assert cmp["none_runs"] == 2
    assert cmp["mtp_over_none"] == 0.52  # 281 against the two starts' mean of 539
    assert cmp["published_mtp_over_none"] == 0.44
    # The KV-cut control (tuner explain, trial 4) sits in its own row, at MTP's cache.
    assert [r["trial"] for r in rows["kv_cut"]] == [4]
    assert abs(rows["kv_cut"][0]["kv_cache_tokens"] / 34_105 - 1) <= 0.02
    # Two configs started twice (the baseline, and n-gram in the confirmation round): 2 df.
    noise = doc["between_start_noise"]
    assert noise["df"] == 2 and noise["runs_per_config"] == {"none": 2, "ngram": 2}
    # Two runs a config deviate by +-d/2 (d their log difference): sd = sqrt(sum(d^2 / 2) / 2).
    d = [
        math.log(a["tasks_per_hour"] / b["tasks_per_hour"])
        for a, b in (rows["none"], rows["ngram"])
    ]
    assert noise["log_sd_per_start"] == pytest.approx(
        math.sqrt(sum(x * x for x in d) / 4), abs=1e-4
    )


def test_the_dashboard_note_carries_the_weights_line_and_the_reuse_evidence(url: str) -> None:
    from tuner.results.dashboard import study_note

    note = study_note(load_results(url))
    assert f"**Weights: {DUMMY_WEIGHTS_LINE}**" in note
    assert "# this config: reuse all/short/none 96/32/16 of 144 scored steps" in note


def test_third_starts_from_a_repeatability_record_join_the_noise(url: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    out = tmp_path / "summary.json"
    record = ROOT / "benchmarks" / "data" / "repeatability-qwen3.8-27b-shape-h200.json"
    argv = ["--storage", url, "--logs", str(logs), "--out", str(out), "--repeatability"]
    assert gpu_study_summary.main([*argv, str(record)]) == 0
    doc = json.loads(out.read_text())
    # No speculation 525, 553 (study) and 513.8 (record); n-gram 488, 434 and 489.2: the
    # pooled sd of log tasks/h about each config's mean, over 2 + 2 df.
    noise = doc["between_start_noise"]
    assert noise["df"] == 4 and noise["runs_per_config"] == {"none": 3, "ngram": 3}
    assert noise["log_sd_per_start"] == pytest.approx(0.0555, abs=5e-4)
    assert doc["between_start_noise_study_only"]["df"] == 2
    assert [r["tasks_per_hour"] for r in doc["repeat_starts"]["ngram"]] == [489.2]
    missing = tmp_path / "nope.json"
    assert gpu_study_summary.main([*argv, str(missing)]) == 2
