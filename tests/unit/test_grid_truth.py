"""The grid's truth (benchmarks/grid_truth.py).

The fit is checked on runs drawn from a known model laid out like the real recording (the 2 GB
half first, drift, a few repeats): the known effects must fall in the fit's intervals, and the
known best config must lead the ranking. A re-record sitting (top configs between baseline
runs, as the one-off `record_grid.py --rerecord` of 5f3cc97 recorded them) joins the fit.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from benchmarks import grid_truth
from benchmarks._grid_replay import LARGE_DATA, GridTable
from tuner.study.space import config_key

TABLE = GridTable.load(LARGE_DATA)
CONFIGS = [TABLE.configs[k].params for k in TABLE.order]
TRUTH_FILE = grid_truth.truth_path(LARGE_DATA)


def _known_mu(p: dict) -> float:
    """A known truth: speculation helps with depth, lookup 1 most, the big KV cache +4%."""
    mu = math.log(1000.0)
    if p["method"] != "none":
        mu += 0.1 * p["num_speculative_tokens"] + 0.05 * (p["prompt_lookup_min"] == 1)
    mu += 0.04 * (p["kv_cache_memory_bytes"] == 2_000_000_000)
    return mu


def _synthetic_grid(tmp_path: Path, seed: int) -> Path:
    """Runs of every config (2 GB half first, as recorded) plus repeats at the end, with a
    -10%/h drift and 6% run noise, in the recorder's file format."""
    rng = random.Random(seed)
    data = json.loads(LARGE_DATA.read_text())
    order = sorted(CONFIGS, key=lambda p: -p["kv_cache_memory_bytes"])
    order += [CONFIGS[0], CONFIGS[5], CONFIGS[17], CONFIGS[40]] * 2
    runs = []
    for i, p in enumerate(order):
        minutes = 2 * i
        y = _known_mu(p) - 0.10 * minutes / 60 + rng.gauss(0, 0.06)
        stamp = f"2026-12-01T{20 + minutes // 60:02d}:{minutes % 60:02d}:00Z"
        runs.append({**data["runs"][0], "params": p, "tasks_per_hour": math.exp(y),
                     "recorded_at": stamp})  # fmt: skip
    data["runs"] = runs
    path = tmp_path / "grid-synthetic.json"
    path.write_text(json.dumps(data))
    return path


def test_the_fit_recovers_a_known_truth_within_its_intervals(tmp_path: Path) -> None:
    path = _synthetic_grid(tmp_path, seed=3)
    doc = grid_truth.build([path], draws=1000, keep=200)
    params = doc["model"]["parameters"]
    lo, hi = params["KV high"]["interval"]
    assert lo <= 0.04 <= hi
    drift = next(e for name, e in params.items() if name.startswith("drift/h "))
    assert drift["interval"][0] <= -0.10 <= drift["interval"][1]
    best = max(CONFIGS, key=_known_mu)
    ranked = [c["key"] for c in doc["configs"]]
    # Depth 4, lookup 1, 2 GB: two configs (max_num_seqs 2 and 8) share the best truth.
    assert ranked.index(config_key(best)) < 2
    assert sum(c["p_best"] for c in doc["configs"]) == pytest.approx(1.0, abs=1e-6)


def _interleaved(configs: list[dict], rounds: int = 3) -> list[dict]:
    """Per round B c c B c c ... B: every config run between two baseline runs."""
    base, order = TABLE.preset.baseline_params(), []
    for _ in range(rounds):
        order.append(base)
        for i, p in enumerate(configs, start=1):
            order += [p, base] if i % 2 == 0 or i == len(configs) else [p]
    return [{"slot": n, "params": p} for n, p in enumerate(order)]


def _synthetic_rerecord(tmp_path: Path, seed: int, ngram_shift: float) -> Path:
    """A re-record sitting of the top configs on another machine: 30% slower, n-gram's gain
    shifted by `ngram_shift` (log), every config run three times between baseline runs."""
    rng = random.Random(seed)
    top = sorted(CONFIGS, key=_known_mu, reverse=True)[:6]
    order = _interleaved(top)
    runs = []
    for e in order:
        p = e["params"]
        y = _known_mu(p) + math.log(0.7) + ngram_shift * (p["method"] != "none")
        y += rng.gauss(0, 0.05)
        stamp = _stamp(2 * e["slot"])
        runs.append({**e, "failure_kind": None, "tasks_per_hour": math.exp(y),
                     "recorded_at": stamp, "cpu": {"cpu_model": "other"}})  # fmt: skip
    path = tmp_path / "grid-rerecord-synthetic.json"
    path.write_text(json.dumps({"cpu": {"cpu_model": "other"}, "plan": order, "runs": runs}))
    return path


def test_a_sitting_where_ngram_helps_less_keeps_the_ranking_and_finds_its_shift(
    tmp_path: Path,
) -> None:
    grid = _synthetic_grid(tmp_path, seed=4)
    again = _synthetic_rerecord(tmp_path, seed=5, ngram_shift=-0.2)
    doc = grid_truth.build([grid, again], draws=1000, keep=200)
    params = doc["model"]["parameters"]
    shift = next(e for name, e in params.items() if name.startswith("n-gram x sitting "))
    assert shift["interval"][0] <= -0.2 <= shift["interval"][1] and shift["interval"][1] < 0
    # The reference speed-up is the grid's: depth 4 lookup 1 is x exp(0.45) over no speculation.
    spec = params["spec ngram d4 lookup 1-3"]
    assert spec["interval"][0] <= 0.45 <= spec["interval"][1]
    best = max(CONFIGS, key=_known_mu)
    assert [c["key"] for c in doc["configs"]].index(config_key(best)) < 2


def test_the_truth_file_names_every_run_s_machine_and_holds_the_draws() -> None:
    doc = json.loads(TRUTH_FILE.read_text())
    assert doc["runs"] and all(r["machine"] and r["sitting"] for r in doc["runs"])
    assert len({r["sitting"] for r in doc["runs"]}) == len(doc["data"])
    keys, mu = grid_truth.load_draws(TRUTH_FILE)
    assert set(keys) == set(TABLE.configs) and mu.shape == (len(mu), len(keys))
    assert mu.shape[0] >= 100
    ranks = [c["rank"] for c in doc["configs"]]
    assert ranks == sorted(ranks) and [c["mu"] for c in doc["configs"]] == sorted(
        (c["mu"] for c in doc["configs"]), reverse=True
    )
    for c in doc["configs"]:
        assert c["interval"][0] <= c["tasks_per_hour"] <= c["interval"][1]
    # The two re-record sittings, each with its ratios to the interleaved baseline.
    again = doc["rerecord_ratios"]
    base = config_key(TABLE.preset.baseline_params())
    assert len(again) == 2 and all(f["machine"] for f in again)
    assert len({k for f in again for k in f["configs"]} - {base}) == 10


def _stamp(minutes: float) -> str:
    return f"2026-12-03T{10 + int(minutes) // 60:02d}:{int(minutes) % 60:02d}:00Z"


def test_a_rerecorded_sitting_joins_the_fit(tmp_path: Path) -> None:
    grid = _synthetic_grid(tmp_path, seed=5)
    configs = [c["params"] for c in json.loads(TRUTH_FILE.read_text())["configs"][:4]]
    order = _interleaved(configs)
    rng = np.random.default_rng(1)
    runs = [
        {**e, "failure_kind": None, "recorded_at": _stamp(2 * e["slot"]), "cpu": {"cpu_model": "B"},
         "tasks_per_hour": float(np.exp(_known_mu(e["params"]) - 0.5 + rng.normal(0, 0.05)))}
        for e in order
    ]  # fmt: skip
    rerecorded = tmp_path / "grid-rerecord.json"
    rerecorded.write_text(json.dumps({"runs": runs}))
    doc = grid_truth.build([grid, rerecorded], draws=500, keep=100)
    assert len(doc["model"]["sittings"]) == 2
    assert {r["machine"] for r in doc["runs"]} >= {"B"}
    name = next(n for n in doc["model"]["parameters"] if n.startswith("sitting "))
    lo, hi = doc["model"]["parameters"][name]["interval"]
    # The synthetic grid's drift is -10%/h from its first run; the new sitting reads -0.5.
    assert lo < -0.2 and hi < 0
