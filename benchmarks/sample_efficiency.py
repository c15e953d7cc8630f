"""How good the search's answer is: seeded studies replayed over a recorded grid at an equal
TOTAL cost, each export judged against the grid's truth with its uncertainty.

Every study runs tuner's own loop (`tuner.study.search.loop.StudyLoop`: sampler, pruner rule,
duplicate handling, constraints, budget) on a simulated-clock backend that answers from the
grid recorded by `benchmarks/record_grid.py` (`benchmarks/_grid_replay.py`: noise by resampling
the recorded per-task outcomes; a trial costs its recorded seconds, a pruned one what it ran),
then the confirmation stage that ships, all within one total budget (`_se_budget.py`: search,
floor start and confirmation together, the search under the product's `--budget` plan and
guard; tuner against random search with the same stage and split, paired by seed, at each
`--run-noise`; the split of the runs between search and confirmation (`--splits`)
chosen per total over `--select-seeds` seeds of their own). The answer is
what `tuner export` would pick (`tuner.results.export.choose_export`, `_se_replay.py`).

The truth is `benchmarks/grid_truth.py`'s posterior (draws of every config's log tasks/h from a
hierarchical model of every recorded run); seed s replays the grid moved to posterior draw s.
regret: 1 - mu(export) / max mu; hit: regret <= 5%.

    python -m benchmarks.sample_efficiency --total-budget [10,25,50] [--seeds 100]
        [--splits 0.2,...,0.9] [--run-noise 0.05,0.10,0.12] [--select-seeds 50]
        [--data FILE] [--truth FILE] [--jobs N] [--out FILE.md] [--readme README.md]
    python -m benchmarks.sample_efficiency --render --readme README.md

Every seed's outcome is written to benchmarks/data/sample-efficiency-seeds-total-<grid>.json,
the table with the command that made it to `--out` (default
benchmarks/data/sample-efficiency-total-<grid>.md) and beside it as JSON, the chosen splits to
sample-efficiency-split-<grid>.json (for planning `tuner optimize --budget`); the README quotes
the JSON (`--readme`, or `--render` from the JSON the last run wrote). Replay mode numbers: load
shape, not graded answers. An incomplete grid is refused (exit 2). The mode before
`--total-budget` and its tables: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._grid_replay import DATA, LARGE_DATA, GridTable
from benchmarks._se_write import _write, grid_facts, rel, render_readme, truth_facts, write_readme
from tuner.study.space import config_key

TOTALS = "10,25,50"  # --total-budget's percents of the grid's cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--seeds", type=int, default=100)
    add("--data", type=Path, default=LARGE_DATA if LARGE_DATA.is_file() else DATA)
    add("--jobs", type=int, default=os.cpu_count() or 1)
    add("--out", type=Path, help="the Markdown table (and .json); default: named after --data")
    add("--truth", type=Path, help="grid_truth.py's file; default: grid-truth-<grid>.json")
    add("--readme", type=Path, help="rewrite this README's section")
    totals = (
        "the total costs, shares of the grid's (search + floor start + confirmation through the "
        f"shipped stage), e.g. {TOTALS} (the default)"
    )
    add("--total-budget", nargs="?", const=TOTALS, default=TOTALS, metavar="PERCENTS", help=totals)
    add("--splits", default="0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", help="search shares tried")
    noise = "between-start run sds replayed (the first chooses the split)"
    add("--run-noise", default="0.05,0.10,0.12", help=noise)
    add("--select-seeds", type=int, default=50, help="seeds (of their own) the split is chosen on")
    render = "no replay: rewrite --readme from the JSON beside --out (what the last run wrote)"
    add("--render", action="store_true", help=render)
    args = parser.parse_args()
    args.out = args.out or out_path(args.data)
    if args.render:
        if args.readme is None:
            print("--render rewrites a README: name it with --readme README.md", file=sys.stderr)
            return 2
        doc = json.loads(args.out.with_suffix(".json").read_text())
        if refused := write_readme(args.readme, doc):
            return refused  # the README has no section: the table is left alone too
        with_section(args.out, doc)
        return 0
    if not args.data.is_file():
        print(f"no grid at {args.data}: record it with benchmarks/record_grid.py", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    table = GridTable.load(args.data)
    if missing := table.missing():
        print(
            f"{args.data}: {len(missing)} configs of its space are not recorded yet (first: "
            f"{missing[0]}); finish the recording with benchmarks/record_grid.py",
            file=sys.stderr,
        )
        return 2
    from benchmarks.grid_truth import load_draws, truth_path

    truth = args.truth or truth_path(args.data)
    if not truth.is_file():
        print(f"no truth at {truth}: fit it with benchmarks/grid_truth.py", file=sys.stderr)
        return 2
    keys, mu = load_draws(truth)
    if set(table.configs) - set(keys):
        print(f"{truth} is not the truth of {args.data}: refit with grid_truth.py", file=sys.stderr)
        return 2
    return total_budget(args, table, truth, keys, mu, t0)


def total_budget(
    args: argparse.Namespace, table: GridTable, truth: Path, keys: list[str], mu: Any, t0: float
) -> int:
    """`--total-budget`: tuner and random at equal total cost through the shipped stage
    (`_se_budget`); writes the seeds, the table, the chosen splits and, with --readme, the
    README's section."""
    from benchmarks import _se_budget as budget

    def floats(text: str) -> tuple[float, ...]:
        return tuple(float(x) for x in text.split(","))

    totals = tuple(x / 100 for x in floats(args.total_budget))
    noises = floats(args.run_noise)
    _, drifts = measured_noise(truth)
    base = config_key(table.preset.baseline_params())
    selection, reported, chosen = budget.run_all(
        args.data, keys, mu, base, drifts,
        totals=totals, splits=floats(args.splits),
        noises=noises, seeds=args.seeds, select_seeds=args.select_seeds, n_jobs=args.jobs,
    )  # fmt: skip
    took = time.monotonic() - t0
    seeds_file = seeds_path(args.out)
    seeds_file.parent.mkdir(parents=True, exist_ok=True)
    seeds_file.write_text(
        json.dumps(
            {"about": budget.__doc__.splitlines()[0], "truth": rel(truth), "keys": keys,
             "selection": selection, "reported": reported},
            separators=(",", ":"),
        ) + "\n"
    )  # fmt: skip
    rows = budget.rows(reported, chosen)
    grid = grid_facts(table, args.data, args.seeds, took)
    grid["truth"] = truth_facts(truth)
    grid["drift_range"] = [round(min(drifts), 4), round(max(drifts), 4)]
    split_file = split_path(args.out)
    splits = budget.split_doc(chosen, rel(args.out.with_suffix(".json")), noises[0])
    split_file.write_text(json.dumps(splits, indent=1) + "\n")
    extra: dict[str, Any] = {
        "kind": "total-budget",
        "seeds_file": rel(seeds_file),
        "split_file": rel(split_file),
        "chosen": chosen,
        "select_seeds": [budget.SELECT_FROM, budget.SELECT_FROM + args.select_seeds - 1],
        "splits_tried": floats(args.splits),
        "k": "by the budget's power choice (Budget.confirm_choice), up to LARGEST_K",
        "verdict": budget.verdict(rows),
    }
    header = (
        f"grid: {grid['configs']} configs, cost {grid['cost_min']} min; truth {rel(truth)}; "
        f"{args.seeds} seeds at equal total cost; split chosen over seeds "
        f"{budget.SELECT_FROM}-{budget.SELECT_FROM + args.select_seeds - 1}"
    )
    lines = [header, "", *budget.table_lines(rows), "", extra["verdict"], ""]
    lines += ["Splits tried (tuner, first noise, the selection's seeds):", ""]
    lines += budget.tried_lines(chosen)
    lines += ["", f"({took:.0f} s)"]
    doc = _write(args.out, lines, rows, grid, extra)
    with_section(args.out, doc)
    print("\n".join(lines))
    return write_readme(args.readme, doc) if args.readme is not None else 0


SECTION = "\nThe README's section:\n\n"


def with_section(out: Path, doc: dict[str, Any]) -> None:
    """The table's Markdown ends with the README's section as rendered now (`--render` renews
    it with the wording, never the numbers)."""
    text = out.read_text().split(SECTION)[0]
    out.write_text(text + SECTION + render_readme(doc) + "\n")


def measured_noise(truth: Path) -> tuple[float, list[float]]:
    """The truth's fitted between-start sd (drift modelled apart) and each sitting's linear
    drift an hour: what a replayed run scatters by, and how its study's box drifts."""
    model = json.loads(truth.read_text())["model"]
    params = model["parameters"]
    drifts = [abs(e["estimate"]) for n, e in params.items() if n.startswith("drift/h ")]
    return float(model["sigma"]["estimate"]), drifts


def out_path(data: Path) -> Path:
    """Where the table for the grid `data` goes: data/sample-efficiency-total-<grid>.md."""
    name = "total-" + data.stem.removeprefix("grid-")
    return Path(__file__).resolve().parent / "data" / f"sample-efficiency-{name}.md"


def split_path(out: Path) -> Path:
    """Where `--total-budget` writes its chosen splits: sample-efficiency-split-<grid>.json
    beside sample-efficiency-total-<grid>.md (`--out` named otherwise: <name>-split.json)."""
    if "-total-" in out.stem:
        return out.with_name(out.stem.replace("-total-", "-split-") + ".json")
    return out.with_name(f"{out.stem}-split.json")


def seeds_path(out: Path) -> Path:
    """Where every seed's outcome goes, beside the table: sample-efficiency-seeds-<grid>.json
    (`--out` named otherwise: <name>-seeds.json, never the table's own JSON)."""
    prefix = "sample-efficiency-"
    if out.stem.startswith(prefix):
        return out.with_name(f"{prefix}seeds-{out.stem.removeprefix(prefix)}.json")
    return out.with_name(f"{out.stem}-seeds.json")


if __name__ == "__main__":
    raise SystemExit(main())
