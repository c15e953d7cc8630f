"""The decision simulation's power table (`benchmarks/decision_sim.py --power-table`): its cells
are the shipped stage's studies, and the file the product copies keeps false wins at bay.
"""

from __future__ import annotations

import json

from benchmarks.decision_sim import (
    FITTED,
    GOAL_FALSE_WIN,
    POWER_OUT,
    power_cell,
    power_markdown,
)


def test_more_rounds_buy_power_at_a_noisy_machine() -> None:
    # At x3 (the product's prior) 3 rounds of the top 2 leave most true +10% gains undecided;
    # 10 rounds find most of them (docs/decision-sim.md's table: about 40% and 80%).
    few = power_cell(2, 3, 3.0, 80, seed=5, stress=FITTED)
    many = power_cell(2, 10, 3.0, 80, seed=5, stress=FITTED)
    assert many["power"]["rate"] >= few["power"]["rate"] + 0.2, (few, many)
    assert many["runs_power"] > few["runs_power"]
    for cell in (few, many):
        lo, hi = cell["power"]["ci95"]
        assert lo <= cell["power"]["rate"] <= hi and hi - lo < 0.25
        assert cell["false_win"]["rate"] <= 0.1


def test_the_written_table_keeps_false_wins_within_the_goal() -> None:
    data = json.loads(POWER_OUT.read_text())
    cells = [c for table in data["tables"].values() for c in table]
    assert len(cells) == 2 * len(data["finalists"]) * len(data["levels"]) * len(data["caps"])
    # A cell over the goal only by chance: its interval's lower end stays under it.
    over = [c for c in cells if c["false_win"]["ci95"][0] > GOAL_FALSE_WIN]
    assert not over, over
    lines = power_markdown(data)
    assert len(lines) == 2 + 2 * len(data["finalists"]) * len(data["levels"])
