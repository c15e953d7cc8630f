"""Which screening rule: what each one stops, and what it wrongly stops, on the recorded grid.

Seeded studies (tuner's sampler and pruner, `sample_efficiency._search`, one slot, up to 50% of
the grid's cost) are replayed with each rule of `_replay.SCREEN_RULES`. Per rule:

- **screened**: candidate trials stopped at a rung, of all trials run;
- **near-best screened**: those whose config is within 5% of the grid's best (the answer a
  study loses when it stops them; the lower the better);
- **saved**: the median, over seeds, of the seconds screening saved (each screened trial's full
  replayed cost minus what it ran) as a share of the grid's cost.

    python benchmarks/screening_rules.py [--seeds 100] [--data FILE]

Replay mode numbers: load shape, not graded answers. `sample_efficiency.py --screening` gives
what a rule does to the answer (hit rates); this says why.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import optuna
from _replay import DATA, SCREEN_RULES, GridTable, config_key
from sample_efficiency import Search, _search

from tuner.attrs import TrialAttr
from tuner.study.pruning import PruneRule
from tuner.study.sampling import make_sampler


def rule_stats(table: GridTable, name: str, seeds: int) -> tuple[int, int, int, float]:
    """(screened, near-best screened, trials, median saved share of the grid's cost)."""
    search = Search(name, make_sampler, PruneRule(screening=SCREEN_RULES[name]))
    grid_cost = table.grid_cost_s()
    screened = near = trials = 0
    saved: list[float] = []
    for seed in range(seeds):
        study, backend = _search(table, search, 1, seed, 0.5)
        seconds = 0.0
        for t in study.get_trials(deepcopy=False):
            if t.number not in backend.spans:
                continue
            trials += 1
            if TrialAttr.SCREENED_OUT_AT not in t.user_attrs:
                continue
            screened += 1
            near += table.near_best(config_key(dict(t.params)))
            start, end = backend.spans[t.number]
            seconds += backend.sims[t.number].cost_s() - (end - start)
        saved.append(seconds / grid_cost)
    return screened, near, trials, statistics.median(saved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"no grid at {args.data}: record it with benchmarks/record_grid.py", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    t0 = time.monotonic()
    table = GridTable.load(args.data)
    print(
        f"grid {args.data.name}: {len(table.configs)} configs; {args.seeds} seeds, tuner's "
        "search, 1 slot, up to 50% of the grid's cost; replay mode (load shape)"
    )
    print("| rule | rungs | slack | screened | near-best screened | saved (median) |")
    print("|---|---|---|---|---|---|")
    for name, rule in SCREEN_RULES.items():
        screened, near, trials, saved = rule_stats(table, name, args.seeds)
        rungs = ", ".join(f"{f:.2f}" for f in rule.rungs)
        print(
            f"| {name} | {rungs} | {rule.slack:.0%} | {screened} of {trials} trials | "
            f"{near} | {saved:.1%} |"
        )
    print(f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
