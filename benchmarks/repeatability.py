"""How repeatable is a trial's score? One config three times, interleaved with another.

Runs the baseline (A) and an n-gram config (B) of a preset as A B A B A B on the real vLLM
build, each run a fresh server start through the same `evaluate()` a study worker calls (no
plain-throughput benchmark). It prints, from that one run:

- per config, tasks/h of each run and their coefficient of variation (CV = stdev / mean);
- the paired ratio B/A of each round and its CV (goal: at most 2% on the CPU preset), and the
  pooled paired estimate with its interval (`tuner.metrics.paired_ratio`);
- the correctness probe: B's token match rate against A's first run, and the floor (A's later
  starts against its first).

With `--lock FILE` each server run takes that flock(2) lock, so a shared machine's other users
get their turn between runs.

    python benchmarks/repeatability.py [--model smollm2-135m --gpu cpu] [--rounds 3]
        [--ngram 3,2,3] [--tasks N] [--agents N] [--lock /tmp/tuner-heavy.lock] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.metrics import RunOutcomes, judge_outputs, match_rates, paired_ratio
from tuner.models import prepare
from tuner.settings import get_settings
from tuner.study import load_preset
from tuner.study.evaluate import ThroughputPlan, TrialRequest, TrialResult, evaluate


@contextlib.contextmanager
def _locked(path: str | None) -> Iterator[None]:
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--gpu", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ngram", default="3,2,3", help="depth,lookup_min,lookup_max of B")
    parser.add_argument("--tasks", type=int, default=None, help="override the preset's tasks")
    parser.add_argument("--agents", type=int, default=None, help="override the preset's agents")
    parser.add_argument("--lock", default=None, help="flock this file around each server run")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()

    preset = load_preset(model=args.model, gpu=args.gpu)
    update = {k: v for k, v in (("tasks", args.tasks), ("agents", args.agents)) if v}
    if update:
        preset = preset.model_copy(update={"workload": preset.workload.model_copy(update=update)})
    settings = get_settings()
    cache = settings.cache_path()
    model_path = (
        str(prepare(preset.model.prepare, cache))
        if preset.model.prepare
        else preset.model.checkpoint
    )
    depth, lo, hi = (int(x) for x in args.ngram.split(","))
    base_params = preset.baseline_params()
    ngram_params = {
        **base_params,
        "method": "ngram",
        "num_speculative_tokens": depth,
        "prompt_lookup_min": lo,
        "prompt_lookup_max": hi,
    }
    configs = {"A": base_params, "B": ngram_params}
    runs: dict[str, list[TrialResult]] = {"A": [], "B": []}
    # The machine's 1-minute load average as each run starts: noise is the machine's as much
    # as the server's, so the figures say how quiet the machine was.
    loads: list[float] = []
    number = 0
    for round_ in range(args.rounds):
        for name, params in configs.items():
            request = TrialRequest(
                study_name="repeatability",
                trial_number=number,
                params=params,
                spec=preset.server_spec(params, model_path=model_path),
                workload=preset.workload,
                cache_dir=str(cache),
                startup_timeout_s=preset.startup_timeout_s,
                throughput=ThroughputPlan(streams=()),
                tokenizer=model_path if Path(model_path).is_dir() else None,
            )
            number += 1
            with _locked(args.lock):
                load_before = os.getloadavg()[0]
                result = evaluate(request)
            loads.append(load_before)
            if result.workload is None or result.failure_kind:
                print(f"round {round_} {name}: failed: {result.failure_reason}", file=sys.stderr)
                return 1
            runs[name].append(result)
            w = result.workload
            print(
                f"round {round_} {name}: {w.tasks_per_hour:,.1f} tasks/h "
                f"({w.successes}/{w.tasks} in {w.scored_wall_s:.1f} s), startup "
                f"{result.startup_s:.1f} s, load average {load_before:.2f} at its start",
                flush=True,
            )
    figures = _figures(runs, preset.workload.model_dump(mode="json"))
    figures["configs"] = configs
    figures["load_average_at_start"] = [round(x, 2) for x in loads]
    for line in _lines(figures):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _outcomes(result: TrialResult) -> RunOutcomes:
    assert result.workload is not None
    return RunOutcomes.of(result.workload.task_records, result.workload.scored_wall_s)


def _figures(runs: dict[str, list[TrialResult]], workload: dict[str, Any]) -> dict[str, Any]:
    tph = {k: [r.workload.tasks_per_hour for r in v if r.workload] for k, v in runs.items()}
    ratios = [b / a for a, b in zip(tph["A"], tph["B"], strict=True)]
    pooled = paired_ratio([_outcomes(r) for r in runs["B"]], [_outcomes(r) for r in runs["A"]])
    out: dict[str, Any] = {
        "workload": {k: workload[k] for k in ("mode", "tasks", "agents", "warmup_tasks")},
        "tasks_per_hour": tph,
        "cv_tasks_per_hour": {k: _cv(v) for k, v in tph.items()},
        "paired_ratios": ratios,
        "cv_paired_ratio": _cv(ratios),
        "pooled": None
        if pooled is None
        else {"ratio": pooled.ratio, "low": pooled.low, "high": pooled.high},
        "run_seconds": {k: [round(r.wall_s, 1) for r in v] for k, v in runs.items()},
    }
    probes_a = [r.probe for r in runs["A"]]
    probes_b = [r.probe for r in runs["B"]]
    if all(p is not None for p in probes_a + probes_b) and len(probes_a) > 1:
        first = probes_a[0].outputs  # type: ignore[union-attr]
        floor = [
            sum(m) / len(m)
            for p in probes_a[1:]
            for m in [match_rates(first, p.outputs)]  # type: ignore[union-attr]
        ]
        ngram = [sum(m) / len(m) for p in probes_b for m in [match_rates(first, p.outputs)]]  # type: ignore[union-attr]
        check = judge_outputs(first, probes_b[0].outputs, *(p.outputs for p in probes_a[1:]))  # type: ignore[union-attr]
        out["probe"] = {
            "prompts": len(first),
            "ngram_match": ngram,
            "floor_match": floor,
            "verdict": check.describe(),
        }
    return out


def _lines(f: dict[str, Any]) -> list[str]:
    lines = [f"workload: {f['workload']}"]
    if f.get("load_average_at_start"):
        loads = f["load_average_at_start"]
        lines.append(
            f"machine: {os.cpu_count()} cores, 1-min load average "
            f"{min(loads):.2f}-{max(loads):.2f} as the runs started"
        )
    for name in ("A", "B"):
        values = ", ".join(f"{v:,.1f}" for v in f["tasks_per_hour"][name])
        lines.append(
            f"{name} ({'baseline' if name == 'A' else 'n-gram'}): tasks/h {values}; "
            f"CV {f['cv_tasks_per_hour'][name]:.1%}"
        )
    ratios = ", ".join(f"{r:.3f}" for r in f["paired_ratios"])
    lines.append(
        f"paired ratio B/A per round: {ratios}; CV {f['cv_paired_ratio']:.1%} (goal <= 2%)"
    )
    if f["pooled"]:
        p = f["pooled"]
        lines.append(f"pooled paired estimate: x{p['ratio']:.3f} [{p['low']:.3f}, {p['high']:.3f}]")
    if "probe" in f:
        p = f["probe"]
        lines.append(
            f"probe ({p['prompts']} prompts, greedy): n-gram token match vs baseline "
            + ", ".join(f"{x:.3f}" for x in p["ngram_match"])
            + "; baseline floor "
            + ", ".join(f"{x:.3f}" for x in p["floor_match"])
            + f"; {p['verdict']}"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
