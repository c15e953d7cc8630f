"""The sample-efficiency metric (benchmarks/_se_metric.py) and its per-seed file.

The README's table must be what the per-seed outcomes saved beside it give: the rows are
recomputed here from that file alone and compared line by line with the README's.
"""

from __future__ import annotations

import copy
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _se_metric as metric  # noqa: E402
import _se_write as write  # noqa: E402
from _grid_replay import LARGE_DATA, GridTable  # noqa: E402
from _se_replay import world_table  # noqa: E402
from grid_truth import load_draws, truth_path  # noqa: E402

from tuner.study.space import config_key  # noqa: E402

TABLE = ROOT / "benchmarks" / "data" / "sample-efficiency-smollm2-135m-cpu-large.md"


def test_the_search_budget_table_is_the_per_seed_file_s() -> None:
    # The README quotes the equal-total-cost table (test_sample_efficiency_budget.py); the
    # search-budget table beside it must still be what its per-seed file gives.
    doc = json.loads(TABLE.with_suffix(".json").read_text())
    seeds = json.loads((ROOT / doc["seeds_file"]).read_text())
    rows, paired = metric.rows_from_seeds(seeds)
    table = write.table_lines(rows)
    lines = write.table_lines(doc["rows"])
    assert table == lines
    assert doc["rows"] == rows and doc["paired"] == paired
    # A seed's outcome changed is a different table: the check above can fail.
    tampered = copy.deepcopy(seeds)
    tampered["searches"][0]["seeds"][0]["regret"][1] += 0.5
    assert write.table_lines(metric.rows_from_seeds(tampered)[0]) != table


def test_regret_and_hit_are_judged_per_draw() -> None:
    keys = ["a", "b", "c"]
    # Draw 1: c is best and b 4% behind it; draw 2: b is best and c 10% behind.
    mu = np.log(np.array([[0.5, 0.96, 1.0], [0.5, 1.0, 0.9]]))
    assert metric.judge("c", "a", keys, mu[:1]) == (0.0, 1.0)
    regret, hit = metric.judge("b", "a", keys, mu[:1])
    assert regret == pytest.approx(0.04) and hit == 1.0
    regret, hit = metric.judge("c", "a", keys, mu)
    assert regret == pytest.approx(0.05) and hit == 0.5
    assert metric.judge(None, "a", keys, mu[:1])[0] == pytest.approx(0.5)  # the baseline stays


def _seeds(regrets: list[float]) -> list[dict]:
    return [
        {"seed": i, "regret": [r] * 3, "hit": [float(r <= 0.05)] * 3} for i, r in enumerate(regrets)
    ]


def test_the_paired_interval_tells_a_real_difference_from_none() -> None:
    rng = random.Random(0)
    base = [rng.uniform(0.0, 0.3) for _ in range(100)]
    better = [max(0.0, r - 0.03 + rng.gauss(0, 0.01)) for r in base]
    d = metric.paired(_seeds(better), _seeds(base))["regret"]["25%"]
    assert d["interval"][1] < 0 and d["diff"] < -0.02 and d["better"] > 80
    same = metric.paired(_seeds(base), _seeds(base))["regret"]["25%"]
    assert same["diff"] == 0 and same["interval"] == [0.0, 0.0]
    noisy = [r + rng.gauss(0, 0.05) for r in base]
    d = metric.paired(_seeds(noisy), _seeds(base))["regret"]["25%"]
    assert d["interval"][0] < 0 < d["interval"][1]


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
    import sample_efficiency as se

    for out in (Path("data/sample-efficiency-x.md"), Path("/tmp/se.md"), Path("seeds.md")):
        assert se.seeds_path(out) != out.with_suffix(".json")
    assert se.seeds_path(Path("d/sample-efficiency-g.md")) == Path(
        "d/sample-efficiency-seeds-g.json"
    )
