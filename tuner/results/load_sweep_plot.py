"""The load sweep's plot: successful tasks/h (with intervals) and per-task latency against agents.

Built with `matplotlib.figure.Figure` and the Agg canvas (no pyplot state), as the report's
other plots; matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

from typing import Any

from tuner.results.load_sweep import LoadSweep
from tuner.results.words import tph_label

__all__ = ["draw_sweep", "sweep_png", "sweep_series"]


def sweep_series(
    sweep: LoadSweep,
) -> list[tuple[str, list[int], list[float], list[float], list[float], list[float]]]:
    """Per config: label, agents, tasks/h, its low and high bound, task p50 latency (s)."""
    out = []
    for c in sweep.configs:
        pts = [p for p in c.points if p.latency_p50_s is not None]
        if not pts:
            continue
        out.append(
            (
                f"{c.key} {c.label}",
                [p.agents for p in pts],
                [p.tasks_per_hour for p in pts],
                [p.tasks_per_hour_low for p in pts],
                [p.tasks_per_hour_high for p in pts],
                [float(p.latency_p50_s or 0.0) for p in pts],
            )
        )
    return out


def draw_sweep(sweep: LoadSweep) -> Any:
    """Two panels against agents: successful tasks/h with intervals, and task p50 latency."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = sweep_series(sweep)
    # The legend goes below both panels (config labels are long); one line per config.
    legend_in = 0.25 * len(series) + 0.2
    fig = Figure(figsize=(10.0, 4.0 + legend_in))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    for i, (label, agents, tph, low, high, latency) in enumerate(series):
        err = [
            [t - lo for t, lo in zip(tph, low, strict=True)],
            [h - t for t, h in zip(tph, high, strict=True)],
        ]
        # Intervals of configs at the same load side by side, not on top of each other.
        dodge = (i - (len(series) - 1) / 2) * 0.04
        left.errorbar(
            [a * (1 + dodge) for a in agents], tph, yerr=err, marker="o", capsize=3, label=label
        )
        right.plot(agents, latency, marker="o", label=label)
    for ax, title in (
        (left, f"{tph_label(sweep.mode)} (95% interval)"),
        (right, "per-task latency, p50 (s)"),
    ):
        ax.set_title(title)
        ax.set_xlabel("agents")
        ax.set_xticks(list(sweep.agents))
        ax.grid(alpha=0.3)
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=1, fontsize="small", frameon=False)
    fig.suptitle(f"load sweep ({sweep.mode}, {sweep.tasks} tasks per load)")
    fig.tight_layout(rect=(0.0, legend_in / (4.0 + legend_in), 1.0, 1.0))
    return fig


def sweep_png(sweep: LoadSweep) -> bytes:
    """The sweep plot as PNG bytes."""
    import io

    buf = io.BytesIO()
    draw_sweep(sweep).savefig(buf, format="png", dpi=110)
    return buf.getvalue()
