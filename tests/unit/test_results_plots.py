"""The plots: the series computed from a study, and the same numbers read back from matplotlib."""

from __future__ import annotations

import io

import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.image import imread

from tuner.results import StudyResults, load_results
from tuner.results.plots import (
    acceptance_series,
    draw_acceptance,
    draw_history,
    draw_kv_cache,
    draw_reuse,
    draw_tasks_per_hour,
    history_series,
    kv_cache_series,
    render_plots,
    reuse_series,
    tasks_per_hour_series,
)
from tuner.testing.sample import write_sample_study


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> StudyResults:
    url = f"sqlite:///{tmp_path_factory.mktemp('plots') / 'study.db'}"
    write_sample_study(url)
    return load_results(url)


def test_tasks_per_hour_bars_and_error_bars(results: StudyResults) -> None:
    s = tasks_per_hour_series(results)
    # Completed configs only (the pruned #4 has a partial score), baseline first.
    assert s.labels == ("#0 no spec", "#1 ngram k=3", "#5 control of #1")
    assert s.values == (752.0, 648.0, 467.0)
    assert (s.lows, s.highs) == ((730.0, 620.0, 440.0), (770.0, 680.0, 490.0))
    ax = draw_tasks_per_hour(s).axes[0]
    assert [p.get_height() for p in ax.patches] == [752.0, 648.0, 467.0]
    (errorbar,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    _, caps, (bars,) = errorbar.lines
    segments = bars.get_segments()
    assert [(seg[0][1], seg[1][1]) for seg in segments] == [(730, 770), (620, 680), (440, 490)]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(s.labels)
    assert caps  # interval caps drawn


def test_tasks_against_kv_cache_points(results: StudyResults) -> None:
    s = kv_cache_series(results)
    assert s.x == (36253.0, 27405.0, 27405.0)
    assert s.y == (752.0, 648.0, 467.0)
    ax = draw_kv_cache(s).axes[0]
    assert ax.collections[0].get_offsets().tolist() == [
        [36253.0, 752.0],
        [27405.0, 648.0],
        [27405.0, 467.0],
    ]
    assert [t.get_text() for t in ax.texts] == list(s.labels)


def test_acceptance_by_position_lines(results: StudyResults) -> None:
    series = acceptance_series(results)
    assert [s.label for s in series] == ["#1 ngram k=3"]
    assert series[0].rates == pytest.approx((0.5, 0.3, 0.1))
    (line,) = draw_acceptance(series).axes[0].lines
    assert list(line.get_xdata()) == [1, 2, 3]
    assert list(line.get_ydata()) == pytest.approx([0.5, 0.3, 0.1])


def test_reuse_stacked_bars(results: StudyResults) -> None:
    s = reuse_series(results)
    assert s.labels == ("#0 no spec", "#1 ngram k=3")
    assert s.fractions["all"] == pytest.approx((7 / 9, 3 / 9))
    assert s.fractions["one_block_short"] == pytest.approx((0.0, 3 / 9))
    ax = draw_reuse(s).axes[0]
    # Four classes x two configs; each config's stack reaches 1.
    tops = {}
    for p in ax.patches:
        x = round(p.get_x() + p.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), p.get_y() + p.get_height())
    assert len(ax.patches) == 8
    assert tops == {0: pytest.approx(1.0), 1: pytest.approx(1.0)}
    assert [p.get_height() for p in ax.containers[1]] == pytest.approx([0.0, 3 / 9])


def test_history_counts_infeasible_as_zero_and_skips_controls(results: StudyResults) -> None:
    s = history_series(results)
    assert s.numbers == (0, 1, 2)
    assert s.values == (752.0, 648.0, 0.0)
    assert s.best_so_far == (752.0, 752.0, 752.0)
    points, best = draw_history(s).axes[0].lines
    assert list(points.get_ydata()) == [752.0, 648.0, 0.0]
    assert list(best.get_ydata()) == [752.0, 752.0, 752.0]


def test_rendered_pngs_are_images_with_content(results: StudyResults) -> None:
    pngs = render_plots(results)
    assert set(pngs) == {
        "tasks_per_hour.png",
        "tasks_vs_kv_cache.png",
        "acceptance_by_position.png",
        "reuse_classes.png",
        "history.png",
    }
    pixels = imread(io.BytesIO(pngs["tasks_per_hour.png"]), format="png")
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600
    assert pixels[..., :3].std() > 0.05  # not a blank canvas


def test_plots_without_data_are_left_out(results: StudyResults) -> None:
    only_baseline = StudyResults(
        results.study_name, results.storage, None, None, (results.trials[0],)
    )
    assert set(render_plots(only_baseline)) == {
        "tasks_per_hour.png",
        "tasks_vs_kv_cache.png",
        "reuse_classes.png",
        "history.png",
    }
