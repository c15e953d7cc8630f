"""The report's plots: the numbers to draw (`*_series`) apart from the drawing (`draw_*`).

Series functions are pure: tests check what would be plotted, then read the same numbers back
from the matplotlib artists. Figures are built with `matplotlib.figure.Figure` and the Agg
canvas directly, so no global pyplot state or display is touched.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tuner.attrs import Role
from tuner.results.load_sweep_plot import draw_sweep
from tuner.results.rows import StudyResults, TrialRow
from tuner.results.words import tph_title
from tuner.workload.reuse import COUNTED_REUSE_CLASSES

__all__ = [
    "PLOT_FILES",
    "AcceptanceSeries",
    "BarSeries",
    "HistorySeries",
    "PointSeries",
    "ReuseSeries",
    "acceptance_series",
    "draw_acceptance",
    "draw_history",
    "draw_kv_cache",
    "draw_reuse",
    "draw_tasks_per_hour",
    "history_series",
    "kv_cache_series",
    "render_plots",
    "reuse_series",
    "short_label",
    "tasks_per_hour_series",
]

_REUSE_COLORS = {
    "all": "#2a9d8f",
    "one_block_short": "#e9c46a",
    "partial": "#f4a261",
    "none": "#e76f51",
}


@dataclass(frozen=True)
class BarSeries:
    """Successful tasks/h per config with its interval."""

    labels: tuple[str, ...]
    values: tuple[float, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    measure: str = "tasks / hour"  # the y axis, in the study's words (tuner.results.words)


@dataclass(frozen=True)
class PointSeries:
    """Successful tasks/h (y) against KV cache tokens (x)."""

    labels: tuple[str, ...]
    x: tuple[float, ...]
    y: tuple[float, ...]
    measure: str = "tasks / hour"


@dataclass(frozen=True)
class AcceptanceSeries:
    """One config's acceptance rate at draft positions 1..k."""

    label: str
    rates: tuple[float, ...]


@dataclass(frozen=True)
class ReuseSeries:
    """Per config, the share of steps in each reuse class (each column sums to 1)."""

    labels: tuple[str, ...]
    fractions: dict[str, tuple[float, ...]]


@dataclass(frozen=True)
class HistorySeries:
    """Objective per trial in order, and the best feasible value so far."""

    numbers: tuple[int, ...]
    values: tuple[float, ...]
    best_so_far: tuple[float, ...]
    measure: str = "tasks / hour"


def short_label(t: TrialRow) -> str:
    """A label short enough for an axis: "#3 ngram k=3", "#0 no spec"."""
    if t.role == Role.CONTROL:
        return f"#{t.number} control of #{t.control_of}"
    if t.method == "none":
        return f"#{t.number} no spec"
    return f"#{t.number} {t.method} k={t.params.get('num_speculative_tokens')}"


def _ordered(results: StudyResults) -> list[TrialRow]:
    return sorted(
        (t for t in results.measured() if t.state == "complete"),
        key=lambda t: (t.role != Role.BASELINE, t.number),
    )


def tasks_per_hour_series(results: StudyResults) -> BarSeries:
    """Completed configs (baseline first) with their tasks/h intervals."""
    rows = [t for t in _ordered(results) if t.tasks_per_hour is not None]
    values = tuple(t.tasks_per_hour or 0.0 for t in rows)
    return BarSeries(
        labels=tuple(short_label(t) for t in rows),
        values=values,
        lows=tuple(
            t.tasks_per_hour_low if t.tasks_per_hour_low is not None else v
            for t, v in zip(rows, values, strict=True)
        ),
        highs=tuple(
            t.tasks_per_hour_high if t.tasks_per_hour_high is not None else v
            for t, v in zip(rows, values, strict=True)
        ),
        measure=tph_title(results.mode),
    )


def kv_cache_series(results: StudyResults) -> PointSeries:
    """Completed configs whose KV cache size was measured."""
    rows = [
        t
        for t in _ordered(results)
        if t.kv_cache_tokens is not None and t.tasks_per_hour is not None
    ]
    return PointSeries(
        labels=tuple(short_label(t) for t in rows),
        x=tuple(float(t.kv_cache_tokens or 0) for t in rows),
        y=tuple(t.tasks_per_hour or 0.0 for t in rows),
        measure=tph_title(results.mode),
    )


def acceptance_series(results: StudyResults) -> list[AcceptanceSeries]:
    """Speculative configs whose per-position acceptance was measured."""
    out = []
    for t in _ordered(results):
        rates = t.acceptance_by_position
        if rates:
            out.append(AcceptanceSeries(short_label(t), rates))
    return out


def reuse_series(results: StudyResults) -> ReuseSeries:
    """Configs with per-step reuse classes."""
    rows = [(t, t.reuse.fractions()) for t in _ordered(results) if t.reuse is not None]
    return ReuseSeries(
        labels=tuple(short_label(t) for t, _ in rows),
        fractions={name: tuple(f[name] for _, f in rows) for name in COUNTED_REUSE_CLASSES},
    )


def history_series(results: StudyResults) -> HistorySeries:
    """Completed non-control trials in order; infeasible ones score 0 (as Optuna saw them)."""
    rows = [
        t
        for t in results.trials
        if t.state == "complete" and t.role != Role.CONTROL and t.value is not None
    ]
    best: list[float] = []
    so_far = 0.0
    for t in rows:
        if t.feasible:
            so_far = max(so_far, t.value or 0.0)
        best.append(so_far)
    return HistorySeries(
        numbers=tuple(t.number for t in rows),
        values=tuple(t.value or 0.0 for t in rows),
        best_so_far=tuple(best),
        measure=tph_title(results.mode),
    )


def _figure(title: str, width: float = 8.0) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    return fig, ax


def draw_tasks_per_hour(s: BarSeries) -> Figure:
    """Bars of tasks/h per config with interval error bars."""
    fig, ax = _figure(f"{s.measure.capitalize()} (with interval)")
    xs = range(len(s.labels))
    err = [
        [v - lo for v, lo in zip(s.values, s.lows, strict=True)],
        [hi - v for v, hi in zip(s.values, s.highs, strict=True)],
    ]
    ax.bar(xs, s.values, yerr=err, capsize=4, color="#457b9d")
    ax.set_xticks(list(xs), s.labels, rotation=20, ha="right")
    ax.set_ylabel(s.measure)
    return fig


def draw_kv_cache(s: PointSeries) -> Figure:
    """Tasks/h against KV cache tokens, one labelled point per config."""
    fig, ax = _figure(f"{s.measure.capitalize()} vs KV cache tokens")
    ax.scatter(s.x, s.y, color="#1d3557")
    for label, x, y in zip(s.labels, s.x, s.y, strict=True):
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.margins(x=0.15, y=0.1)  # room for the labels beside the points
    ax.set_xlabel("KV cache tokens")
    ax.set_ylabel(s.measure)
    return fig


def draw_acceptance(series: list[AcceptanceSeries]) -> Figure:
    """Acceptance rate by draft position, one line per speculative config."""
    fig, ax = _figure("Draft acceptance by position")
    for s in series:
        ax.plot(range(1, len(s.rates) + 1), s.rates, marker="o", label=s.label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted / drafts")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    return fig


def draw_reuse(s: ReuseSeries) -> Figure:
    """Stacked bars: share of steps per reuse class, per config."""
    fig, ax = _figure("Prefix reuse per step")
    xs = list(range(len(s.labels)))
    bottom = [0.0] * len(xs)
    for name in COUNTED_REUSE_CLASSES:
        values = s.fractions[name]
        ax.bar(xs, values, bottom=bottom, label=name.replace("_", " "), color=_REUSE_COLORS[name])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(xs, s.labels, rotation=20, ha="right")
    ax.set_ylabel("share of steps")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars
    return fig


def draw_history(s: HistorySeries) -> Figure:
    """Objective per trial and the best feasible value so far."""
    fig, ax = _figure("Optimization history")
    ax.plot(s.numbers, s.values, "o", color="#457b9d", label="trial")
    ax.step(s.numbers, s.best_so_far, where="post", color="#e63946", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel(s.measure)
    ax.legend(fontsize=8)
    return fig


def _plots(results: StudyResults) -> dict[str, Callable[[], Figure] | None]:
    # Each entry draws, or is None when there is nothing measured to draw.
    tph = tasks_per_hour_series(results)
    kv = kv_cache_series(results)
    acc = acceptance_series(results)
    reuse = reuse_series(results)
    hist = history_series(results)
    return {
        "tasks_per_hour.png": (lambda: draw_tasks_per_hour(tph)) if tph.labels else None,
        "tasks_vs_kv_cache.png": (lambda: draw_kv_cache(kv)) if kv.labels else None,
        "acceptance_by_position.png": (lambda: draw_acceptance(acc)) if acc else None,
        "reuse_classes.png": (lambda: draw_reuse(reuse)) if reuse.labels else None,
        "history.png": (lambda: draw_history(hist)) if hist.numbers else None,
        "load_sweep.png": partial(draw_sweep, results.sweep) if results.sweep else None,
    }


PLOT_FILES = (
    "tasks_per_hour.png",
    "tasks_vs_kv_cache.png",
    "acceptance_by_position.png",
    "reuse_classes.png",
    "history.png",
    "load_sweep.png",
)


def render_plots(results: StudyResults) -> dict[str, bytes]:
    """PNG bytes per file name, for the plots that have data (see `PLOT_FILES`)."""
    out = {}
    for name, draw in _plots(results).items():
        if draw is None:
            continue
        buf = io.BytesIO()
        draw().savefig(buf, format="png", dpi=110)
        out[name] = buf.getvalue()
    return out
