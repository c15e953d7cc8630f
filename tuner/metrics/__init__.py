"""Measurement around a workload run: /metrics deltas, GPU energy, and the score."""

from __future__ import annotations

from tuner.metrics.energy import (
    EnergyMeter,
    FakeNvml,
    NoEnergyMeter,
    NvmlEnergyMeter,
    energy_meter_for,
)
from tuner.metrics.prometheus import (
    MetricsSnapshot,
    ServerCounters,
    counter_deltas,
    parse_metrics,
    scrape_metrics,
)
from tuner.metrics.scoring import (
    Score,
    bootstrap_tasks_per_hour,
    percentile,
    score_tasks,
    wilson_interval,
)

__all__ = [
    "EnergyMeter",
    "FakeNvml",
    "MetricsSnapshot",
    "NoEnergyMeter",
    "NvmlEnergyMeter",
    "Score",
    "ServerCounters",
    "bootstrap_tasks_per_hour",
    "counter_deltas",
    "energy_meter_for",
    "parse_metrics",
    "percentile",
    "score_tasks",
    "scrape_metrics",
    "wilson_interval",
]
