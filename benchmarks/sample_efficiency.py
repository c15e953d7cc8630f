"""How good the search's answer is: seeded studies replayed over a recorded grid, each export
judged against the grid's truth with its uncertainty.

Every study runs tuner's own loop (`tuner.study.search.loop.StudyLoop`: sampler, pruner rule,
duplicate handling, constraints, budget) on a simulated-clock backend that answers from the
grid recorded by `benchmarks/record_grid.py` (`benchmarks/_grid_replay.py`: noise by resampling the
recorded per-task outcomes; a trial costs its recorded seconds, a pruned one what it ran). At
10%, 25% and 50% of the grid's cost (slot-seconds: with several slots, the time of all of
them) the study's answer is what `tuner export` would pick (`tuner.results.export
.choose_export`) from the trials finished by then (`_se_replay.py`).

The truth is `benchmarks/grid_truth.py`'s posterior (draws of every config's log tasks/h from a
hierarchical model of every recorded run). Per search and budget (`_se_metric.py`):

- **regret**: 1 - mu(export) / max mu, mean and median over the seeds; with `--world posterior`
  (the default) seed s replays the grid moved to posterior draw s, so averaging over seeds
  averages over the truth's uncertainty; `--world recorded` replays the recorded means and
  averages each export's regret over every draw;
- **hit**: the share of seeds (of draws) whose export is within 5% of the best;
- each search minus random search, paired by seed, with a bootstrap 95% interval.

Searches: tuner's (its sampler and pruner, as shipped), random search (uniform draws, the same
pruner), the grid in order (every config in `record_grid.grid` order, none pruned, as a sweep
would), and `tuner optimize` on the CPU preset as shipped: the search with the preset's
screening, then its confirmation stage (`ConfirmPlan.for_preset`, through
`tuner.study.stages.confirm`'s own planning and the same loop); its cells also give what the
answer cost in all.

    python benchmarks/sample_efficiency.py [--seeds 100] [--data FILE] [--truth FILE] [--jobs N]
        [--world posterior|recorded] [--variants] [--slots 1,2,4] [--screening] [--out FILE.md]
        [--readme README.md] [--render]
    python benchmarks/sample_efficiency.py --total-budget [10,25,50] [--splits 0.2,...,0.9]
        [--ks 1,2] [--run-noise 0.05,0.10,0.12] [--select-seeds 50] [--readme README.md]

Every seed's outcome is written to benchmarks/data/sample-efficiency-seeds-<grid>.json; the
table (`_se_write.py`), printed and written with the command that made it to `--out` (default
benchmarks/data/sample-efficiency-<grid>.md) and beside it as JSON, is computed from that file
alone (`_se_metric.rows_from_seeds`); the README quotes the JSON (`--readme`, or `--render` from
the JSON the last run wrote), and tests/unit/test_sample_efficiency_seeds.py checks that the
README's table is the per-seed file's. One slot by default (the README's rows); `--slots 1,2,4`
also replays parallel trials, each slot count as long again.

`--total-budget [10,25,50]` (what the README quotes) prices every study at an equal TOTAL cost:
search, floor start and the shipped confirmation stage (`confirm.run_looks`: its looks,
futility stop and drops) together, tuner against random search with the same stage and split,
paired by seed, at each `--run-noise` (default 5%, 10%, 12%); the split between search and
confirmation (`--splits`, `--ks`) is chosen per total over `--select-seeds` seeds of their own
and written to sample-efficiency-split-<grid>.json for planning `tuner optimize --budget`
(`_se_budget.py`).

`--variants` also replays other sampler and pruner settings and confirmation settings;
`--only NAME` (repeatable) keeps the named searches alone. Replay mode numbers: load shape, not
graded answers. An incomplete grid is refused (exit 2) unless a complete part of it holds the
baseline (see `_replay.GridTable.partial`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _grid_replay import DATA, LARGE_DATA, GridTable
from _se_grid_facts import grid_facts, knob_lines, rel, truth_facts
from _se_metric import rows_from_seeds, seed_records
from _se_replay import SLOTS, StudyRun, _init, _one
from _se_searches import (
    DEFAULT,
    SEARCHES_ALL,
    VARIANTS,
    Gp,
    _confirm_variants,
    _screening_searches,
)
from _se_write import (
    BEGIN,
    END,
    _write,
    md_table,
    paired_lines,
    regret_lines,
    render_readme,
    verdict_lines,
    write_readme,
)

from tuner.study.space import config_key

__all__ = ["BEGIN", "DEFAULT", "END", "main", "render_readme", "verdict_lines", "write_readme"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--data", type=Path, default=LARGE_DATA if LARGE_DATA.is_file() else DATA)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--slots",
        default=",".join(map(str, SLOTS)),
        help="slot counts to replay, e.g. 1 (the README's rows are one slot)",
    )
    parser.add_argument("--variants", action="store_true", help="also the settings compared")
    parser.add_argument(
        "--only",
        action="append",
        metavar="SEARCH",
        help="replay only this search (by its printed name; repeat for several)",
    )
    parser.add_argument(
        "--out", type=Path, help="the Markdown table (and .json); default: named after --data"
    )
    parser.add_argument(
        "--truth", type=Path, help="grid_truth.py's file; default: grid-truth-<grid>.json"
    )
    parser.add_argument(
        "--world",
        choices=("posterior", "recorded"),
        default="posterior",
        help="replay each seed in a posterior draw of the truth, or the recorded means",
    )
    parser.add_argument(
        "--noise",
        choices=("measured", "grid"),
        default="measured",
        help="between-start noise: the truth's fitted run sd with its sittings' drifts "
        "(measured), or the grid's repeats as they are (grid: 1-2 h apart, drift inside)",
    )
    parser.add_argument(
        "--screening", action="store_true", help="also tuner and random search with screening"
    )
    parser.add_argument(
        "--readme",
        type=Path,
        help="rewrite this README's sample-efficiency section from the result (needs --screening)",
    )
    parser.add_argument(
        "--total-budget",
        nargs="?",
        const="10,25,50",
        metavar="PERCENTS",
        help="every study at an equal TOTAL cost (search + floor start + confirmation through "
        "the shipped stage), e.g. 10,25,50 (the default); tuner against random, paired",
    )
    parser.add_argument(
        "--splits",
        default="0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9",
        help="with --total-budget: search shares tried",
    )
    parser.add_argument("--ks", default="1,2", help="with --total-budget: finalists tried")
    parser.add_argument(
        "--run-noise",
        default="0.05,0.10,0.12",
        help="with --total-budget: between-start run sds replayed (the first chooses the split)",
    )
    parser.add_argument(
        "--select-seeds",
        type=int,
        default=50,
        help="with --total-budget: seeds (of their own) the split is chosen on",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="no replay: rewrite --readme from the JSON beside --out (what the last run wrote)",
    )
    args = parser.parse_args()
    args.out = args.out or out_path(args.data, total=args.total_budget is not None)
    if args.render:
        if args.readme is None:
            print("--render rewrites a README: name it with --readme README.md", file=sys.stderr)
            return 2
        doc = json.loads(args.out.with_suffix(".json").read_text())
        if doc.get("kind") == "total-budget":
            with_section(args.out, doc)
        return write_readme(args.readme, doc)
    if args.readme is not None and args.only:
        print("--readme quotes every search's row: leave out --only", file=sys.stderr)
        return 2
    if args.readme is not None and not args.screening and args.total_budget is None:
        print("--readme quotes the screening rows: add --screening", file=sys.stderr)
        return 2
    if args.screening:
        SEARCHES_ALL.extend(_screening_searches(all_rules=args.variants))
    if args.variants:
        SEARCHES_ALL.extend(VARIANTS)
        SEARCHES_ALL.extend(_confirm_variants())
    if args.only:
        unknown = [n for n in args.only if n not in {s.name for s in SEARCHES_ALL}]
        if unknown:
            names = ", ".join(repr(s.name) for s in SEARCHES_ALL)
            print(f"--only {unknown[0]!r}: no such search here; one of {names}", file=sys.stderr)
            return 2
        SEARCHES_ALL[:] = [s for s in SEARCHES_ALL if s.name in args.only]
        if importlib.util.find_spec("scipy") is None:
            # GPSampler needs SciPy (the test extras install it; tuner itself does not need it).
            print("GPSampler not compared: `pip install scipy` to include it", file=sys.stderr)
            SEARCHES_ALL[:] = [s for s in SEARCHES_ALL if not isinstance(s.sampler, Gp)]
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
    from grid_truth import load_draws, truth_path

    truth = args.truth or truth_path(args.data)
    if not truth.is_file():
        print(f"no truth at {truth}: fit it with benchmarks/grid_truth.py", file=sys.stderr)
        return 2
    keys, mu = load_draws(truth)
    if set(table.configs) - set(keys):
        print(f"{truth} is not the truth of {args.data}: refit with grid_truth.py", file=sys.stderr)
        return 2
    if args.total_budget is not None:
        return total_budget(args, table, truth, keys, mu, t0)
    worlds = None
    if args.world == "posterior":
        worlds = [
            dict(zip(keys, map(float, mu[s % len(mu)]), strict=True)) for s in range(args.seeds)
        ]
    slots = tuple(int(x) for x in args.slots.split(","))
    jobs = [(i, k, s) for i in range(len(SEARCHES_ALL)) for k in slots for s in range(args.seeds)]
    out: dict[tuple[int, int], dict[int, StudyRun]] = {}
    noise = measured_noise(truth) if args.noise == "measured" else None
    init = (str(args.data), worlds, noise)
    with ProcessPoolExecutor(args.jobs, initializer=_init, initargs=init) as pool:
        for i, k, seed, run in pool.map(_one, jobs, chunksize=8):
            out.setdefault((i, k), {})[seed] = run
    took = time.monotonic() - t0
    base = config_key(table.preset.baseline_params())
    seeds_doc: dict[str, Any] = {
        "about": (
            "Every replayed study's outcome, written by benchmarks/sample_efficiency.py: exports "
            "per budget (indices into keys), their regret and hit under the truth, trials, cost."
        ),
        "truth": rel(truth),
        "world": args.world,
        "budgets": ["10%", "25%", "50%"],
        "keys": keys,
        "searches": [
            {
                "search": search.name,
                "slots": k,
                "confirm": search.confirm is not None,
                "seeds": seed_records(out[(i, k)], base, keys, mu, args.world),
            }
            for i, search in enumerate(SEARCHES_ALL)
            for k in slots
        ],
    }
    seeds_file = seeds_path(args.out)
    seeds_file.parent.mkdir(parents=True, exist_ok=True)
    seeds_file.write_text(json.dumps(seeds_doc, separators=(",", ":")) + "\n")
    rows, paired = rows_from_seeds(seeds_doc)
    grid = grid_facts(table, args.data, args.seeds, took)
    grid["truth"] = truth_facts(truth)
    grid["knob_lines"] = knob_lines(grid)
    grid["noise"] = noise_words(noise)
    grid["noise_sd"] = None if noise is None else noise[0]
    header = (
        f"grid: {grid['configs']} configs, cost {grid['cost_min']} min; truth {rel(truth)} "
        f"({args.world} world); {args.seeds} seeds; noise: {grid['noise']}; workload "
        f"{table.preset.workload.mode} mode (load shape, answers not graded)"
    )
    lines = md_table(rows, header, took) + paired_lines(paired)
    verdict = verdict_lines(grid, rows)
    extra = {"world": args.world, "noise": args.noise, "seeds_file": rel(seeds_file)}
    extra["paired"] = paired
    extra["verdict"] = [line for line in verdict if line]
    extra["regret_verdict"] = regret_lines({"rows": rows, "paired": paired})
    lines += ["", *extra["regret_verdict"], *verdict]
    lines += ["", "What the memory knobs changed on this grid (one run per config, drift in):"]
    lines += [f"- {x}" for x in grid["knob_lines"]]
    print("\n".join(lines))
    doc = _write(args.out, lines, rows, grid, extra)
    return write_readme(args.readme, doc) if args.readme is not None else 0


def total_budget(
    args: argparse.Namespace, table: GridTable, truth: Path, keys: list[str], mu: Any, t0: float
) -> int:
    """`--total-budget`: tuner and random at equal total cost through the shipped stage
    (`_se_budget`); writes the seeds, the table, the chosen splits and, with --readme, the
    README's section."""
    import _se_budget as budget

    def floats(text: str) -> tuple[float, ...]:
        return tuple(float(x) for x in text.split(","))

    totals = tuple(x / 100 for x in floats(args.total_budget))
    noises = floats(args.run_noise)
    _, drifts = measured_noise(truth)
    base = config_key(table.preset.baseline_params())
    selection, reported, chosen = budget.run_all(
        args.data, keys, mu, base, drifts,
        totals=totals, splits=floats(args.splits), ks=tuple(int(x) for x in args.ks.split(",")),
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
    extra = {
        "kind": "total-budget",
        "seeds_file": rel(seeds_file),
        "split_file": rel(split_file),
        "chosen": chosen,
        "select_seeds": [budget.SELECT_FROM, budget.SELECT_FROM + args.select_seeds - 1],
        "splits_tried": floats(args.splits),
        "ks_tried": [int(x) for x in args.ks.split(",")],
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


def noise_words(noise: tuple[float, list[float]] | None) -> str:
    """The noise a replay used, in words."""
    if noise is None:
        return "the grid's repeats (1-2 h apart, drift inside), each run independent"
    sd, drifts = noise
    return (
        f"run sd {sd:.1%} between starts (the truth's fit) and a drift of one of its sittings "
        f"({min(drifts):.0%}-{max(drifts):.0%} an hour, either sign) on the study's clock"
    )


def out_path(data: Path, *, total: bool = False) -> Path:
    """Where the table for the grid `data` goes: benchmarks/data/sample-efficiency-<grid>.md
    (`total`: sample-efficiency-total-<grid>.md)."""
    name = ("total-" if total else "") + data.stem.removeprefix("grid-")
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
