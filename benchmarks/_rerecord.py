"""Re-record the truth's top configs, interleaved with the baseline (`record_grid.py --rerecord`).

The grid's top configs were mostly run once, in its faster first hour; `grid_truth.py` ranks
them on a model and names about ten to run again (its file's `rerecord.configs`). Each is run
`rounds` times (3), in one sitting on one machine; a round runs them in its own seeded order with
a baseline run before the first and after every second config (B c c B c c ... B), so every
config run sits between two baseline runs at most three runs apart. A config run's ratio to the
interleaved baseline is its tasks/h over the baseline's interpolated (in log, by time) between
the baseline runs before and after it: slow drift cancels, and runs of another CPU can join the
truth as ratios. The file (`benchmarks/data/grid-rerecord-<grid>.json`) keeps every run (with its
CPU, time and load, as `record_grid.py` writes runs) and the ratios; it is rewritten after every
run and a rerun resumes after the last recorded slot. `grid_truth.py` reads it as one more
sitting (its own offset and drift). A sitting that could not finish is continued with
`--continue FILE --out NEW` (on another machine too): NEW takes FILE's plan from the slot after
FILE's last run and is a sitting of its own.

At the grid's recorded 98-162 s a run, 10 configs x 3 rounds + 18 baseline runs = 48 runs is
about 1.3-2 hours of an otherwise idle 2-core box: `--dry-run` prints the plan and the estimate.
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.study.space import Preset, config_key

ROUNDS = 3
PER_BASELINE = 2  # config runs between two baseline runs


def plan(
    configs: list[dict[str, Any]], baseline: dict[str, Any], rounds: int = ROUNDS, seed: int = 36
) -> list[dict[str, Any]]:
    """The run order: per round, B c c B c c ... B with the configs in a seeded order."""
    base = config_key(baseline)
    picks = [c for c in configs if config_key(c) != base]
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        order = list(picks)
        random.Random(seed + r).shuffle(order)
        out.append({"role": "baseline", "round": r, "params": baseline})
        for i, params in enumerate(order, start=1):
            out.append({"role": "config", "round": r, "params": params})
            if i % PER_BASELINE == 0 or i == len(order):
                out.append({"role": "baseline", "round": r, "params": baseline})
    for slot, entry in enumerate(out):
        entry["slot"] = slot
    return out


def _hours(run: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(run["recorded_at"].replace("Z", "+00:00")).timestamp() / 3600


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each config run's tasks/h over the baseline's, interpolated in log by recording time
    between the nearest baseline runs before and after it (only runs with both)."""
    ok = [r for r in runs if r.get("tasks_per_hour") and r.get("failure_kind") is None]
    base = sorted((r for r in ok if r["role"] == "baseline"), key=lambda r: r["slot"])
    out = []
    for r in ok:
        if r["role"] != "config":
            continue
        before = [b for b in base if b["slot"] < r["slot"]]
        after = [b for b in base if b["slot"] > r["slot"]]
        if not before or not after:
            continue
        b0, b1 = before[-1], after[0]
        t0, t1, t = _hours(b0), _hours(b1), _hours(r)
        w = 0.5 if t1 <= t0 else min(1.0, max(0.0, (t - t0) / (t1 - t0)))
        log_base = (1 - w) * math.log(b0["tasks_per_hour"]) + w * math.log(b1["tasks_per_hour"])
        out.append(
            {
                "slot": r["slot"],
                "key": config_key(r["params"]),
                "ratio": round(math.exp(math.log(r["tasks_per_hour"]) - log_base), 4),
                "baseline_slots": [b0["slot"], b1["slot"]],
            }
        )
    return out


def new_file(preset: Preset, truth: Path, machine: dict[str, Any]) -> dict[str, Any]:
    return {
        "about": (
            "The truth's top configs re-recorded interleaved with the baseline by "
            "benchmarks/record_grid.py --rerecord (see benchmarks/_rerecord.py); 'ratios' are "
            "each config run's tasks/h over the interpolated baseline's."
        ),
        "truth": str(truth),
        "cpu": machine,
        "preset": json.loads(preset.model_dump_json()),
        "plan": [],
        "runs": [],
        "ratios": [],
    }


def dry_run(todo: list[dict[str, Any]], done: int, seconds: list[float]) -> int:
    """Print the runs to go and how long they take at the grid's recorded seconds."""
    print(f"re-record: {len(todo) + done} runs, {done} recorded, {len(todo)} to go")
    for entry in todo:
        print(f"  {entry['slot']:3d}. round {entry['round']} {entry['role']:8s} "
              f"{config_key(entry['params'])}")  # fmt: skip
    if seconds:
        mean = sum(seconds) / len(seconds)
        print(
            f"estimate: {len(todo)} runs x {mean:.0f} s (mean of {len(seconds)} recorded runs, "
            f"{min(seconds):.0f}-{max(seconds):.0f} s) = {len(todo) * mean / 3600:.1f} h "
            "of an idle box"
        )
    return 0


def rerecord(
    truth: Path,
    out: Path,
    preset: Preset,
    *,
    dry: bool,
    limit: int | None,
    grid: Any,
    evaluate: Callable[[Preset, dict[str, Any], int], dict[str, Any]] | None = None,
    machine: dict[str, Any] | None = None,
    continues: Path | None = None,
) -> int:
    """Record (or with `dry`, list) the plan's runs still missing from `out`. `evaluate` (one
    run's entry) and `machine` default to `record_grid.evaluate_once` and this machine's CPU;
    tests pass stand-ins (no model or vLLM here). `grid` is the `record_grid` module, passed
    in by its `--rerecord` (so that this module does not import its caller back).

    `continues`: an earlier re-record file (another machine's, or a sitting that ended): `out`
    takes its plan and records the slots after its last recorded run, as a sitting of its own
    (the plan's rounds each start with a baseline run, so a continuation that starts at a
    round has its own interleaved baselines and ratios)."""
    rg = grid

    if not truth.is_file():
        print(f"no truth at {truth}: fit it with benchmarks/grid_truth.py", file=sys.stderr)
        return 2
    data = rg._load(out)
    if data is not None and data.get("continues"):
        order, first = data["plan"], int(data["first_slot"])
    elif continues is not None:
        earlier = rg._load(continues)
        if earlier is None:
            print(f"--continue {continues}: no such re-record file", file=sys.stderr)
            return 2
        order, first = earlier["plan"], len(earlier["runs"])
    else:
        configs = json.loads(truth.read_text())["rerecord"]["configs"]
        order, first = plan(configs, preset.baseline_params()), 0
    done = first + (len(data["runs"]) if data else 0)
    if data is not None and data["plan"] != order:
        print(f"{out} holds another plan (another truth?); move it away first", file=sys.stderr)
        return 2
    todo = order[done:] if limit is None else order[done : done + limit]
    if dry:
        return dry_run(todo, done, rg.recorded_run_seconds(rg.LARGE_DATA))
    if machine is None:
        from benchmarks._machine import machine_record

        machine = rg.cpu_of(machine_record())
    here = machine
    run_one = evaluate or rg.evaluate_once
    if data is None:
        data = new_file(preset, truth, here)
        data["plan"] = order
        if continues is not None:
            data["continues"], data["first_slot"] = str(continues), first
        rg._save(out, data)
    elif data["cpu"] != here:
        print(f"{out} was recorded on {data['cpu']}; this is {here}: one sitting, one machine",
              file=sys.stderr)  # fmt: skip
        return 2
    for entry in todo:
        result = run_one(preset, entry["params"], entry["slot"])
        run = {**entry, **result, "cpu": here}
        data["runs"].append(run)
        data["ratios"] = ratios(data["runs"])
        rg._save(out, data)
        print(
            f"[{entry['slot'] + 1}/{len(order)}] {run.get('recorded_at')} {entry['role']} "
            f"{config_key(entry['params'])}: {run.get('tasks_per_hour')} tasks/h",
            flush=True,
        )
    return 0
