"""The metric half of `sample_efficiency.py`: each study's export judged against the truth.

The truth is the posterior of `grid_truth.py` (draws of every config's mu, log tasks/h). The
regret of an export in one draw is 1 - exp(mu(export) - max mu): the share of the best config's
tasks/h the exported one gives up; hit@5% is regret <= 5%. Two worlds:

- **posterior** (the default): seed s replays the grid moved to draw s (`_se_replay
  .world_table`), so the study searches the very truth it is judged by; averaging over seeds
  averages over posterior draws.
- **recorded**: the grid replays its recorded means (the runs as they came, drift included) and
  each export is judged by its regret averaged over all draws (the judge is the posterior, the
  world the study searched is not).

Beside the export, two picks from the same finished trials: "naive" (the config of the highest
single run) and "oracle" (the best of them by the replayed world's means: the ceiling of any
pick, exact in the posterior world). They tell the search from the pick.

Every seed's outcome is kept (`seed_records`); the table's rows (`rows_from_seeds`) and the paired
differences against random search (`paired`, a bootstrap over seeds) are computed from them alone,
so the README's table is a function of the per-seed file.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
from _se_replay import BUDGETS, StudyRun

NEAR = 0.05
BOOT = 2000  # bootstrap resamples of the seeds
LABELS = [f"{b:.0%}" for b in BUDGETS]


def judge(key: str | None, base: str, keys: list[str], mu: np.ndarray) -> tuple[float, float]:
    """(regret, hit) of exporting `key` (None: nothing exported; the baseline stays) averaged
    over the rows of `mu` (draws x configs, columns in `keys` order)."""
    j = keys.index(key if key is not None else base)
    gap = mu[:, j] - mu.max(axis=1)
    regret = 1 - np.exp(gap)
    return float(regret.mean()), float((regret <= NEAR + 1e-12).mean())


def seed_records(
    runs: dict[int, StudyRun], base: str, keys: list[str], mu: np.ndarray, world: str
) -> list[dict[str, Any]]:
    """One record per seed: its exports (indices into `keys`), their regret and hit, and the
    study's own facts (trials, cost spent, baseline exported, near-best found)."""
    out = []
    for seed in sorted(runs):
        r = runs[seed]
        draw = seed % len(mu)
        judged = mu[draw : draw + 1] if world == "posterior" else mu
        scores = [judge(k, base, keys, judged) for k in r.exports]
        naive = [judge(k, base, keys, judged)[0] for k in r.naive]
        oracle = [judge(k, base, keys, judged)[0] for k in r.oracle]
        out.append(
            {
                "seed": seed,
                "draw": draw if world == "posterior" else None,
                "exports": [keys.index(k) if k is not None else None for k in r.exports],
                "regret": [round(x, 5) for x, _ in scores],
                "hit": [round(h, 4) for _, h in scores],
                "naive_regret": [round(x, 5) for x in naive],
                "oracle_regret": [round(x, 5) for x in oracle],
                "trials": r.trials,
                "spent": [round(x, 4) for x in r.spent],
                "baseline": list(r.baseline),
                "found": list(r.found),
                "reach": None if r.reach is None else round(r.reach, 4),
            }
        )
    return out


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def row_of(name: str, slots: int, seeds: list[dict[str, Any]], confirm: bool) -> dict[str, Any]:
    """The table's row of one search, from its per-seed records."""
    n = len(seeds)
    per = range(len(LABELS))
    row: dict[str, Any] = {
        "search": name,
        "slots": slots,
        "seeds": n,
        "regret_mean": {LABELS[i]: round(sum(s["regret"][i] for s in seeds) / n, 4) for i in per},
        "regret_median": {
            LABELS[i]: round(_median([s["regret"][i] for s in seeds]), 4) for i in per
        },
        "hit": {LABELS[i]: round(sum(s["hit"][i] for s in seeds) / n, 4) for i in per},
        "trials": _median([s["trials"] for s in seeds]),
    }
    for field in ("naive_regret", "oracle_regret"):
        if all(len(s.get(field, ())) == len(LABELS) for s in seeds):
            row[field] = {LABELS[i]: round(sum(s[field][i] for s in seeds) / n, 4) for i in per}
    if confirm:
        row["cost"] = {LABELS[i]: round(_median([s["spent"][i] for s in seeds]), 4) for i in per}
    for field in ("baseline", "found"):
        if all(len(s[field]) == len(LABELS) for s in seeds):
            row[field] = {LABELS[i]: sum(s[field][i] for s in seeds) / n for i in per}
    reached = sorted(s["reach"] if s["reach"] is not None else math.inf for s in seeds)
    median = statistics.median(reached)
    row["reach"] = None if median == math.inf else median
    return row


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """a - b per budget over the seeds both ran (paired by seed: same truth draw, same noise
    stream): mean regret and hit share, each with a percentile bootstrap 95% interval."""
    by_b = {s["seed"]: s for s in b}
    common = [s for s in a if s["seed"] in by_b]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(common), size=(BOOT, len(common)))
    out: dict[str, Any] = {"seeds": len(common)}
    for field in ("regret", "hit", "naive_regret", "oracle_regret"):
        if not all(field in s for s in common):
            continue
        cells = {}
        for i, label in enumerate(LABELS):
            d = np.array([s[field][i] - by_b[s["seed"]][field][i] for s in common])
            boot = d[idx].mean(axis=1)
            lo, hi = np.quantile(boot, [0.025, 0.975])
            cells[label] = {
                "diff": round(float(d.mean()), 4),
                "interval": [round(float(lo), 4), round(float(hi), 4)],
                "better": int((d > 0).sum() if field == "hit" else (d < 0).sum()),
                "worse": int((d < 0).sum() if field == "hit" else (d > 0).sum()),
            }
        out[field] = cells
    return out


def counterparts(name: str, confirm: bool, ran: dict[str, Any]) -> list[str]:
    """What a tuner search is paired against: random search with the same screening and
    confirmation (`tuner + screening` against `random + screening`, `tuner optimize (...)`
    against `random + ...`), plain random search (what the issue's goal names), and, with
    `--variants`, the same study whose finalists are its highest single runs."""
    if not name.startswith("tuner") or name.endswith("[raw finalists]"):
        return []
    same = "random" + name.removeprefix("tuner")
    if confirm:
        same = next((r for r in ran if r.startswith("random +") and ran[r]["confirm"]), same)
    # The same study with the finalists picked by their highest single runs (`--variants`).
    raw = f"{name} [raw finalists]"
    return [r for r in dict.fromkeys([raw, same, "random"]) if r in ran and r != name]


def rows_from_seeds(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of the table and the paired differences against random search (1 slot), from
    the per-seed file's content alone."""
    rows = [row_of(e["search"], e["slots"], e["seeds"], e["confirm"]) for e in doc["searches"]]
    one = {e["search"]: e for e in doc["searches"] if e["slots"] == 1}
    diffs = {}
    for name, e in one.items():
        for ref in counterparts(name, e["confirm"], one):
            diffs[f"{name} - {ref}"] = {
                "search": name,
                "against": ref,
                **paired(e["seeds"], one[ref]["seeds"]),
            }
    return rows, diffs
