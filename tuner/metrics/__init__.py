"""Measurement around a workload run: /metrics deltas, GPU energy, and the score."""

from __future__ import annotations

from tuner.metrics.correctness import (
    OutputCheck,
    judge_outputs,
    match_rates,
    two_proportion_drop,
)
from tuner.metrics.energy import (
    EnergyMeter,
    FakeNvml,
    NoEnergyMeter,
    NvmlEnergyMeter,
    energy_meter_for,
)
from tuner.metrics.noise import DEFAULT_NOISE, BetweenRunNoise
from tuner.metrics.paired import PairedEstimate, RunOutcomes, holm, paired_ratio
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
    makespan,
    percentile,
    score_tasks,
    wilson_interval,
)
from tuner.metrics.success import paired_success_drop

__all__ = [
    "DEFAULT_NOISE",
    "BetweenRunNoise",
    "EnergyMeter",
    "FakeNvml",
    "MetricsSnapshot",
    "NoEnergyMeter",
    "NvmlEnergyMeter",
    "OutputCheck",
    "PairedEstimate",
    "RunOutcomes",
    "Score",
    "ServerCounters",
    "bootstrap_tasks_per_hour",
    "counter_deltas",
    "energy_meter_for",
    "holm",
    "judge_outputs",
    "makespan",
    "match_rates",
    "paired_ratio",
    "paired_success_drop",
    "parse_metrics",
    "percentile",
    "score_tasks",
    "scrape_metrics",
    "two_proportion_drop",
    "wilson_interval",
]
