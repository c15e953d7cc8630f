"""The decision simulation's goals, in CI: a change to the export rule that lets identical
configs win more than 5% of studies, or finds a true +10% in fewer than 80%, fails here.

`benchmarks/decision_sim.py` draws whole studies from the recorded CPU runs and judges them with
`tuner.results.export.choose_export` itself; here at a reduced count (seconds), new rule only.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tuner.metrics import DEFAULT_NOISE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from decision_sim import (
    GOAL_FALSE_WIN,
    GOAL_POWER,
    SCENARIOS,
    load_recorded,
    run_scenario,
)


def test_default_stage_meets_the_goals() -> None:
    from tuner.study import load_preset
    from tuner.study.stages.confirm import ConfirmPlan

    # The simulated default is the CPU preset's own stage.
    cpu = load_preset(model="smollm2-135m", gpu="cpu")
    assert SCENARIOS[0].plan == ConfirmPlan.for_preset(cpu)
    t0 = time.monotonic()
    row = run_scenario(SCENARIOS[0], 300, seed=1, legacy=False)
    assert row["new"]["false_win"] <= GOAL_FALSE_WIN, row
    assert row["new"]["power"] >= GOAL_POWER, row
    assert time.monotonic() - t0 < 60


def test_without_confirmation_identical_configs_do_not_win() -> None:
    # --confirm 0: five one-round comparisons, Holm-corrected, with the between-run term.
    (off,) = [s for s in SCENARIOS if not s.plan.enabled]
    row = run_scenario(off, 200, seed=2, legacy=False, power=False)
    assert row["new"]["false_win"] <= GOAL_FALSE_WIN, row


def test_the_default_noise_is_the_one_the_recorded_runs_give() -> None:
    derived = load_recorded().noise()
    assert (derived.log_sd, derived.df) == (DEFAULT_NOISE.log_sd, DEFAULT_NOISE.df)
