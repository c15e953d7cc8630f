"""The grid's truth with its uncertainty: a hierarchical model fitted to every recorded run.

A config's "true" tasks/h is not its highest recorded run: 48 of the large grid's 52 configs
were run once, and the grid was recorded half by half (the 2 GB KV cache first, 300 MB an hour
later) on a box that drifted. This fits, to every run of the recorded grids,

    log tasks/h = spec(method x depth x lookup) + KV + max_num_seqs      (knob effects)
                  [+ interactions, kept where the data support them: AIC of the ML fit]
                  + u(config)                       (per-config effect, ~ N(0, tau^2))
                  + sitting + n-gram x sitting      (machine/sitting offset, its n-gram shift)
                  + drift(sitting) x hours          (linear drift; drift^2 in long sittings)
                  + e(run)                          (run-to-run noise, ~ N(0, sigma^2))

and a config's truth mu is the fixed part plus u at the large grid's sitting, at the mean time
of its runs (regret is a ratio of mus, so this reference cancels). The fit: restricted
likelihood (REML) over (tau, sigma) on a grid, prior flat on tau and on log sigma, flat on the
fixed effects; given (tau, sigma) the effects are Gaussian, so posterior draws are exact up to
the grid (no Laplace step). The runs of the 10-config grid (another, slower machine; its configs
are all in the large one) join with their own sitting offset, n-gram shift and drift; so do the
runs of each re-recording of the top 10 (`grid-rerecord-*.json`, one sitting a file, on a Zen 4
and a Xeon, interleaved with the baseline by the one-off `record_grid.py --rerecord`). How much
n-gram speculation helps is a sitting's own (the machine, and how many cores vLLM was given);
the differences among n-gram configs are shared, so a re-record sharpens the ranking at the top.

    python -m benchmarks.grid_truth [--data GRID.json ...] [--draws 4000] [--out FILE]

Writes benchmarks/data/grid-truth-<grid>.json: the parameters with 95% intervals, each config's
posterior mean and interval, P(best), P(within 5% of the best), the ranking, every run with its
machine and residual, posterior draws of every mu (what `sample_efficiency.py` judges exports
against), and each re-record file's ratios to its interleaved baseline.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._truth_model import Design, Run, choose_interactions, fit
from tuner.study.space import config_key

HERE = Path(__file__).resolve().parent
LARGE = HERE / "data" / "grid-smollm2-135m-cpu-large.json"
SMALL = HERE / "data" / "grid-smollm2-135m-cpu.json"
# Re-record sittings: the first file, and its continuations on other machines (`--continue`).
RERECORDS = "grid-rerecord-smollm2-135m-cpu-large*.json"
NEAR = 0.05  # "near-best": within 5% of the best


def _machine_name(data: dict[str, Any], run: dict[str, Any]) -> str:
    cpu = run.get("cpu") or data.get("cpu")
    if not cpu:
        return f"{data.get('machine', 'unknown')} (no CPU record)"
    words = [str(cpu[k]) for k in ("cpu_model", "cpu_family_model") if cpu.get(k)]
    if cpu.get("cores"):
        words.append(f"{cpu['cores']} cores")
    return " ".join(words)


def _when(run: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(run["recorded_at"].replace("Z", "+00:00"))


def load_runs(paths: list[Path], keys: set[str] | None = None) -> list[Run]:
    """Every finished run of the files (configs outside `keys` left out); one sitting a file."""
    out: list[Run] = []
    for path in paths:
        data = json.loads(path.read_text())
        ok = [
            (i, r)
            for i, r in enumerate(data["runs"])
            if r["failure_kind"] is None and r.get("tasks_per_hour") and r.get("recorded_at")
        ]
        ok = [(i, r) for i, r in ok if keys is None or config_key(r["params"]) in keys]
        if not ok:
            continue
        t0 = min(_when(r) for _, r in ok)
        for i, r in ok:
            machine = _machine_name(data, r)
            out.append(
                Run(
                    source=rel(path),
                    index=i,
                    key=config_key(r["params"]),
                    params=r["params"],
                    y=math.log(float(r["tasks_per_hour"])),
                    sitting=f"{path.stem} on {machine}",
                    machine=machine,
                    hours=(_when(r) - t0).total_seconds() / 3600,
                )
            )
    return out


def _iv(x: np.ndarray, scale: float = 1.0, digits: int = 4) -> list[float]:
    lo, hi = np.quantile(x, [0.025, 0.975])
    return [round(float(lo) * scale, digits), round(float(hi) * scale, digits)]


def summarize(f: dict[str, Any], runs: list[Run], configs: list[dict], keep: int) -> dict:
    """The truth file's content (without the draws' rounding and the plan)."""
    mu = f["mu"]
    best = mu.max(axis=1, keepdims=True)
    p_best = (mu == best).mean(axis=0)
    p_near = (mu >= best + math.log(1 - NEAR)).mean(axis=0)
    shortfall = 1 - np.exp(mu - best)  # per draw, each config's regret
    order = np.argsort(-mu.mean(axis=0))
    design: Design = f["design"]
    point, bdraws = f["beta"]
    params = {
        name: {
            "estimate": round(float(point[j]), 4),
            "interval": _iv(bdraws[:, j]),
            "ratio": round(math.exp(float(point[j])), 4)
            if not name.startswith("intercept")
            else None,
        }
        for j, name in enumerate(design.names)
    }
    table = []
    for rank, c in enumerate(order, start=1):
        m = mu[:, c]
        table.append(
            {
                "rank": rank,
                "key": f["keys"][c],
                "params": configs[c],
                "runs": sum(r.key == f["keys"][c] for r in runs),
                "tasks_per_hour": round(float(np.exp(m).mean()), 1),
                "interval": [round(float(np.exp(v)), 1) for v in np.quantile(m, [0.025, 0.975])],
                "mu": round(float(m.mean()), 4),
                "p_best": round(float(p_best[c]), 4),
                "p_near_best": round(float(p_near[c]), 4),
                "regret": round(float(shortfall[:, c].mean()), 4),
            }
        )
    return {
        "model": {
            "formula": (
                "log tasks/h = spec(method x depth x lookup) + KV + max_num_seqs + interactions "
                "+ u(config) + sitting + drift(sitting) x hours + e"
            ),
            "reference": f"mu: sitting {design.sittings[0]}, at the mean time of its runs",
            "fit": "REML over a (tau, sigma) grid, flat priors; exact Gaussian draws given it",
            "tau": {"estimate": round(f["tau"][0], 4), "interval": _iv(f["tau"][1])},
            "sigma": {"estimate": round(f["sigma"][0], 4), "interval": _iv(f["sigma"][1])},
            "parameters": params,
            "sittings": design.sittings,
        },
        "expected_near_best": round(float(p_near.sum()), 2),
        "p_best_top": round(float(p_best.max()), 4),
        "configs": table,
        "runs": [
            {
                "source": r.source,
                "index": r.index,
                "key": r.key,
                "machine": r.machine,
                "sitting": r.sitting,
                "hours": round(r.hours, 3),
                "tasks_per_hour": round(math.exp(r.y), 2),
                "residual": round(float(e), 4),
            }
            for r, e in zip(runs, f["resid"], strict=True)
        ],
        "draws": {
            "keys": f["keys"],
            "mu": [[round(float(v), 4) for v in row] for row in mu[:keep]],
        },
    }


def build(paths: list[Path], draws: int, keep: int, seed: int = 36) -> dict[str, Any]:
    """Fit and summarize: the truth file's content."""
    large = json.loads(paths[0].read_text())
    from benchmarks._grid_replay import GridTable

    table = GridTable(large)
    configs = [table.configs[k].params for k in table.order if table.configs[k].ok]
    keys = {config_key(p) for p in configs}
    runs = load_runs(paths, keys)
    chosen = choose_interactions(runs, [config_key(p) for p in configs], configs)
    f = fit(runs, configs, tuple(chosen["kept"]), draws, seed)
    return {
        "about": (
            "Written by benchmarks/grid_truth.py: the grid's truth as a posterior (see its "
            "docstring). mu is log tasks/h at the reference sitting; regret of a config in a "
            "draw is 1 - exp(mu - max mu)."
        ),
        "command": "python -m benchmarks.grid_truth " + " ".join(sys.argv[1:]),
        "data": [rel(p) for p in paths],
        "interactions": chosen,
        "n_runs": len(runs),
        "n_configs": len(configs),
        **summarize(f, runs, configs, keep),
        "rerecord_ratios": rerecord_ratios(paths),
    }


def rerecord_ratios(paths: list[Path]) -> list[dict[str, Any]]:
    """Each re-record file's ratios to its interleaved baseline, by config: the geometric mean
    and the runs (what a sitting on another machine says of the top configs, before the fit)."""
    out = []
    for path in paths:
        data = json.loads(path.read_text())
        if "ratios" not in data:
            continue
        by_key: dict[str, list[float]] = {}
        for r in data["ratios"]:
            by_key.setdefault(r["key"], []).append(r["ratio"])
        out.append(
            {
                "file": rel(path),
                "machine": _machine_name(data, data["runs"][0]) if data["runs"] else "",
                "configs": {
                    k: {
                        "ratio": round(math.exp(sum(map(math.log, v)) / len(v)), 4),
                        "runs": [round(x, 4) for x in v],
                    }
                    for k, v in by_key.items()
                },
            }
        )
    return out


def load_draws(path: Path) -> tuple[list[str], np.ndarray]:
    """The posterior draws of every config's mu that a truth file holds."""
    doc = json.loads(path.read_text())
    return doc["draws"]["keys"], np.array(doc["draws"]["mu"])


def truth_path(grid: Path) -> Path:
    """Where the truth of the grid file `grid` goes."""
    return grid.with_name("grid-truth-" + grid.stem.removeprefix("grid-") + ".json")


def rel(path: Path) -> str:
    """`path` relative to the repository (as the README names files)."""
    try:
        return path.resolve().relative_to(HERE.parent).as_posix()
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    first = "grid files; the first is the reference"
    parser.add_argument("--data", type=Path, action="append", help=first)
    parser.add_argument("--draws", type=int, default=4000, help="posterior draws")
    parser.add_argument("--keep", type=int, default=1000, help="draws written to the file")
    parser.add_argument("--out", type=Path, help="default: grid-truth-<grid>.json beside it")
    args = parser.parse_args(argv)
    # The first sitting's file, then its continuations (longer names), each in name order.
    rerecords = sorted((HERE / "data").glob(RERECORDS), key=lambda p: (len(p.name), p.name))
    paths = args.data or [p for p in (LARGE, SMALL) if p.is_file()] + rerecords
    for p in paths:
        if not p.is_file():
            print(f"no grid file at {p}", file=sys.stderr)
            return 2
    if args.draws < 100 or not 100 <= args.keep <= args.draws:
        print("--draws must be >= 100 and --keep between 100 and --draws", file=sys.stderr)
        return 2
    doc = build(paths, args.draws, args.keep)
    out = args.out or truth_path(paths[0])
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    m = doc["model"]
    print(f"{doc['n_runs']} runs of {doc['n_configs']} configs -> {rel(out)}")
    chosen = doc["interactions"]
    print(f"interactions kept: {chosen['kept']} (dAIC by step {chosen['delta_aic_by_step']})")
    print(f"tau {m['tau']['estimate']} {m['tau']['interval']}, sigma {m['sigma']['estimate']} "
          f"{m['sigma']['interval']}")  # fmt: skip
    for name, e in m["parameters"].items():
        print(f"  {name}: {e['estimate']:+.4f} {e['interval']}")
    print(f"expected configs within 5% of the best: {doc['expected_near_best']}")
    for c in doc["configs"][:12]:
        print(
            f"  {c['rank']:2d}. {c['tasks_per_hour']:7.1f} {c['interval']} P(best) "
            f"{c['p_best']:.3f} P(near) {c['p_near_best']:.3f} runs {c['runs']} {c['key']}"
        )
    rank = {c["key"]: c["rank"] for c in doc["configs"]}
    for f in doc["rerecord_ratios"]:
        print(f"re-record {f['file']} ({f['machine']}): ratio to the interleaved baseline")
        for key, e in sorted(f["configs"].items(), key=lambda kv: rank[kv[0]]):
            print(f"  rank {rank[key]:2d}: x{e['ratio']:.3f} {e['runs']} {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
