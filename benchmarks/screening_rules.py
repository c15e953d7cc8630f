"""Which screening rule: what each one stops, and what it wrongly stops, on the recorded grid.

Seeded studies (tuner's sampler and pruner, `sample_efficiency._search`, one slot, up to 50% of
the grid's cost) are replayed with each rule of `_replay.SCREEN_RULES`. Per rule:

- **screened**: candidate trials stopped at a rung, of all trials run;
- **near-best screened**: those whose config is within 5% of the grid's best (the answer a
  study loses when it stops them; the lower the better);
- **saved**: the median, over seeds, of the seconds screening saved (each screened trial's full
  replayed cost minus what it ran) as a share of the grid's cost.

    python benchmarks/screening_rules.py [--seeds 100] [--data FILE] [--jobs N] [--out FILE.md]

The table is printed and written, with the command that made it, to `--out` (default
benchmarks/data/screening-rules-<grid>.md, named after `--data`); one process per rule.

Replay mode numbers: load shape, not graded answers. `sample_efficiency.py --screening` gives
what a rule does to the answer (hit rates); this says why.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import optuna
from _grid_replay import DATA, SCREEN_RULES, GridTable
from sample_efficiency import Search, _search

from tuner.attrs import TrialAttr
from tuner.study.search.pruning import PruneRule
from tuner.study.search.sampling import make_sampler
from tuner.study.space import config_key


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


def _one_rule(job: tuple[str, str, int]) -> tuple[str, tuple[int, int, int, float]]:
    data, name, seeds = job
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return name, rule_stats(GridTable.load(Path(data)), name, seeds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=None, help="default: named after --data")
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"no grid at {args.data}: record it with benchmarks/record_grid.py", file=sys.stderr)
        return 2
    out = args.out or Path(__file__).resolve().parent / "data" / (
        "screening-rules-" + args.data.stem.removeprefix("grid-") + ".md"
    )
    t0 = time.monotonic()
    table = GridTable.load(args.data)
    lines = [
        "# Screening rules (written by benchmarks/screening_rules.py)",
        "",
        "`" + " ".join(["python", "benchmarks/screening_rules.py", *sys.argv[1:]]) + "`",
        "",
        f"grid {args.data.name}: {len(table.configs)} configs; {args.seeds} seeds, tuner's "
        "search, 1 slot, up to 50% of the grid's cost; replay mode (load shape)",
        "",
        "| rule | rungs | slack | screened | near-best screened | saved (median) |",
        "|---|---|---|---|---|---|",
    ]
    jobs = [(str(args.data), name, args.seeds) for name in SCREEN_RULES]
    with ProcessPoolExecutor(args.jobs) as pool:
        stats = dict(pool.map(_one_rule, jobs))
    for name, rule in SCREEN_RULES.items():
        screened, near, trials, saved = stats[name]
        rungs = ", ".join(f"{f:.2f}" for f in rule.rungs)
        lines.append(
            f"| {name} | {rungs} | {rule.slack:.0%} | {screened} of {trials} trials | "
            f"{near} | {saved:.1%} |"
        )
    lines.append(f"({time.monotonic() - t0:.0f} s, {os.cpu_count()} cores)")
    print("\n".join(lines))
    out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
