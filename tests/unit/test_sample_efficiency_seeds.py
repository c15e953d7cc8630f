"""The sample-efficiency metric and world: regret and hit judged per posterior draw
(`_se_budget.judge`), a replay moved to one draw (`_se_replay.world_table`), and the per-seed
file's name. (That the README's table is its per-seed file's: test_sample_efficiency_budget.py.)
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from benchmarks import _se_budget as budget
from benchmarks._grid_replay import LARGE_DATA, GridTable
from benchmarks._se_replay import world_table
from benchmarks.grid_truth import load_draws, truth_path
from tuner.study.space import config_key

ROOT = Path(__file__).resolve().parents[2]

TABLE = ROOT / "benchmarks" / "data" / "sample-efficiency-smollm2-135m-cpu-large.md"


def test_regret_and_hit_are_judged_per_draw() -> None:
    keys = ["a", "b", "c"]
    # Draw 1: c is best and b 4% behind it; draw 2: b is best and c 10% behind.
    mu = np.log(np.array([[0.5, 0.96, 1.0], [0.5, 1.0, 0.9]]))
    assert budget.judge("c", "a", keys, mu[:1]) == (0.0, 1.0)
    regret, hit = budget.judge("b", "a", keys, mu[:1])
    assert regret == pytest.approx(0.04) and hit == 1.0
    regret, hit = budget.judge("c", "a", keys, mu)
    assert regret == pytest.approx(0.05) and hit == 0.5
    assert budget.judge(None, "a", keys, mu[:1])[0] == pytest.approx(0.5)  # the baseline stays


def test_the_floor_is_the_best_completed_config_s_regret_not_the_export_s() -> None:
    keys = ["a", "b", "c"]
    mu = np.log(np.array([[0.5, 0.96, 1.0]]))  # a the baseline, c the best, b 4% behind

    def seed(export: str | None, completed: tuple[str, ...]) -> dict[str, object]:
        run = budget.Budgeted(export, 0.25, 0.2, 2, 10, "win", False, 1, completed)
        return budget.record((0, 0.25, 0.7, 0.05, 0), run, "a", keys, mu)

    # The study ran c but exported b: the choice cost 4 points, the search none.
    assert seed("b", ("a", "b", "c"))["regret"] == pytest.approx(0.04)
    assert seed("b", ("a", "b", "c"))["floor"] == 0.0
    # It never ran c: the floor is b's, whatever it exported.
    assert seed("a", ("a", "b"))["floor"] == pytest.approx(0.04)
    # Nothing completed: the baseline stays, and so does its regret.
    assert seed(None, ())["floor"] == pytest.approx(0.5)
    cell = budget.cell([seed("b", ("a", "b", "c")), seed("a", ("a", "b"))])
    assert cell["floor_median"] == pytest.approx(0.02)
    assert cell["regret_median"] == pytest.approx(0.27)
    # A per-seed file written before the floor was recorded gives no floor, not a wrong one.
    old = {k: v for k, v in seed("b", ("a", "b", "c")).items() if k != "floor"}
    assert "floor_median" not in budget.cell([old])


def test_a_posterior_world_replays_each_config_at_its_draw() -> None:
    table = GridTable.load(LARGE_DATA)
    keys, mu = load_draws(truth_path(LARGE_DATA))
    draw = dict(zip(keys, map(float, mu[7]), strict=True))
    world = world_table(table, draw)
    best = max(keys, key=draw.__getitem__)
    base = config_key(table.preset.baseline_params())
    rates = {}
    for key in (best, base):
        rng = random.Random(1)
        runs = [world.replay(world.configs[key].params, rng) for _ in range(300)]
        rates[key] = np.mean([math.log(r.tasks_per_hour) for r in runs if r is not None])
    # The replayed gap between two configs is the draw's (the run noise is common to both).
    assert rates[best] - rates[base] == pytest.approx(draw[best] - draw[base], abs=0.03)
    assert world.configs[best].tasks_per_hour == pytest.approx(math.exp(draw[best]))
    assert table.configs[best].tasks_per_hour != world.configs[best].tasks_per_hour


def test_the_per_seed_file_never_takes_the_table_s_place() -> None:
    from benchmarks import sample_efficiency as se

    for out in (Path("data/sample-efficiency-x.md"), Path("/tmp/se.md"), Path("seeds.md")):
        assert se.seeds_path(out) != out.with_suffix(".json")
    assert se.seeds_path(Path("d/sample-efficiency-g.md")) == Path(
        "d/sample-efficiency-seeds-g.json"
    )


def test_the_verdict_reads_a_replay_of_one_noise_or_without_the_goal_s_total() -> None:
    keys = ["a", "b", "c"]
    mu = np.log(np.array([[0.5, 0.96, 1.0]]))

    def seeds(search: int, export: str, total: float) -> list[dict[str, object]]:
        run = budget.Budgeted(export, total, 0.2, 2, 10, "win", False, 1, ("a", export))
        return [budget.record((search, total, 0.7, 0.05, s), run, "a", keys, mu) for s in range(3)]

    # One noise (5%): tuner exports c (regret 0), random b (4%).
    records = seeds(0, "c", 0.25) + seeds(1, "b", 0.25)
    chosen = {"25%": {"split": 0.7, "k": budget.BY_POWER, "tried": []}}
    text = budget.verdict(budget.rows(records, chosen))
    assert "median 0.0%, minus random -4.0 points" in text and text.count("met") == 1
    assert "at noise" not in text.lower() and "floor there" in text
    # A replay of 10% and 50% only: no goal row, no verdict, no crash.
    records = seeds(0, "c", 0.10) + seeds(1, "b", 0.10)
    chosen = {"10%": {"split": 0.7, "k": budget.BY_POWER, "tried": []}}
    assert "left out" in budget.verdict(budget.rows(records, chosen))
