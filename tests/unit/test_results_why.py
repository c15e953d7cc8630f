"""The `tuner explain` table inside `tuner report`, from a study whose control finished."""

from __future__ import annotations

from pathlib import Path

from tuner.results import load_results, report_tables
from tuner.results.report import report_markdown, summary_lines, why_tables
from tuner.testing.sample import SampleScore, write_sample_study


def test_report_carries_the_why_table_with_published_numbers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'why.db'}"
    # The published run: baseline 752, the speculative config 330, the KV-cut control 467.
    write_sample_study(url, ngram=SampleScore(330.0, 300.0, 360.0))
    results = load_results(url)
    ((table, sentence),) = why_tables(results)
    assert table.title == "Why trial #1 scored what it did"
    assert [row[0] for row in table.rows] == ["#0", "#1", "#5"]
    assert table.column("completed tasks/h [interval]")[2].startswith("467")
    assert table.column("KV cache tokens")[2] == "27,405"
    assert sentence == (
        "trial #1: the smaller KV cache explains 285 of the 422 tasks/h lost (68%); "
        "the rest is cache reuse (steps reusing their whole previous prompt: 33% against 78%)"
    )
    assert table in report_tables(results)
    assert f"Why {sentence}" in summary_lines(results)
    assert "## Why trial #1 scored what it did" in report_markdown(results)


def test_no_why_table_without_controls(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    write_sample_study(url)
    results = load_results(url)
    plain = [t for t in results.trials if t.role != "control"]
    assert why_tables(type(results)(**{**results.__dict__, "trials": tuple(plain)})) == []
