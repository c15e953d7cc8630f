"""The report says when a study's baseline drifts over its fresh starts (issue 27)."""

from __future__ import annotations

from pathlib import Path

from tuner.results import load_results
from tuner.results.report import baseline_drift_line, summary_lines
from tuner.testing.sample import SampleScore, write_sample_study


def _results(tmp: Path, name: str, confirm: tuple[tuple[float, float], ...]):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp / f'{name}.db'}"
    write_sample_study(url, baseline=SampleScore(600, 580, 620), confirm=confirm)
    return load_results(url)


def test_a_baseline_that_warms_over_its_starts_is_reported(tmp_path: Path) -> None:
    # The search run at 600 tasks/h, then three confirmation rounds rising (issue 27's shape).
    results = _results(tmp_path, "warming", ((680.0, 900.0), (720.0, 950.0), (760.0, 990.0)))
    line = baseline_drift_line(results)
    assert line is not None
    assert "over 4 fresh starts (600, 680, 720, 760 tasks/h)" in line
    assert "trend: the baseline's tasks/h rises" in line and "not exchangeable" in line
    assert line in summary_lines(results)


def test_a_steady_baseline_says_no_trend(tmp_path: Path) -> None:
    results = _results(tmp_path, "steady", ((590.0, 900.0), (612.0, 950.0), (598.0, 990.0)))
    line = baseline_drift_line(results)
    assert line is not None and "no trend" in line and "not exchangeable" not in line


def test_under_three_starts_there_is_no_line(tmp_path: Path) -> None:
    results = _results(tmp_path, "short", ((680.0, 900.0),))
    assert baseline_drift_line(results) is None
    assert not any(x.startswith("Drift") for x in summary_lines(results))
