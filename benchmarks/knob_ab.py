"""Does one knob change tasks/h? Two configs that differ only there, interleaved, fresh starts.

The large grid (`record_grid.py --space large`) recorded its 2 GB half first and its 300 MB half
about an hour later, and its repeated configs read lower late than early (the baseline 1,244
tasks/h, then 1,070 and 1,021 an hour on): a KV-cache effect read off the grid's config pairs is
the knob and that hour's drift together. This measures the knob alone: config A (a grid
config) and B (A with one knob changed) run as A B, B A, A B, ... (each round swaps the order,
so a steady drift falls on both sides alike), every run a fresh server start through the same
`evaluate()` a study worker calls, with the plain-throughput benchmark off. It prints each
round's B/A ratio of tasks/h and the paired estimate over the rounds with its interval
(`tuner.metrics.paired_ratio`, the export rule's own test; the interval includes the
between-run term), and appends a record (configs, runs, ratios, machine, load) to
benchmarks/data/knob-ab-<model>-<gpu>.json, which `sample_efficiency.py` quotes beside the
grid's figure for the same knob.

    python benchmarks/knob_ab.py --knob kv_cache_memory_bytes=300000000 [--rounds 3]
        [--config JSON] [--lock /tmp/tuner-heavy.lock]

The default A is the noise config the grid ran at `max_num_seqs` 2 (n-gram depth 3, lookup
2-3, 2 GB). Replay workload: load shape, not graded answers. One real-vLLM job at a time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.metrics import RunOutcomes
    from tuner.study.trial.evaluate import TrialResult

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_A: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 3,
    "kv_cache_memory_bytes": 2_000_000_000,
    "max_num_seqs": 2,
}


def data_path(model: str, gpu: str) -> Path:
    """Where the records of this preset's A/B runs go."""
    return DATA_DIR / f"knob-ab-{model}-{gpu}.json"


def records(path: Path) -> list[dict[str, Any]]:
    """Every record the file holds (none when it does not exist)."""
    return json.loads(path.read_text()) if path.is_file() else []


def order(rounds: int) -> list[str]:
    """A B, B A, A B, ...: which config runs first alternates round by round."""
    return [x for i in range(rounds) for x in (("A", "B") if i % 2 == 0 else ("B", "A"))]


def _parse_knob(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--knob {text!r}: write it as NAME=VALUE, e.g. max_num_seqs=8")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def _outcomes(result: TrialResult) -> RunOutcomes:
    from tuner.metrics import RunOutcomes

    assert result.workload is not None
    return RunOutcomes.of(result.workload.task_records, result.workload.scored_wall_s)


def high_over_low(record: dict[str, Any]) -> dict[str, Any] | None:
    """The paired estimate as the higher value's tasks/h over the lower's (None: unpaired)."""
    est = record["paired"]
    if est is None or record["b_value"] > record["a_value"]:
        return est
    return {"ratio": 1 / est["ratio"], "low": 1 / est["high"], "high": 1 / est["low"]}


def figure(record: dict[str, Any]) -> str:
    """The paired estimate (higher value over lower), its rounds and the machine, in words."""
    est = high_over_low(record)
    what = (
        f"x{est['ratio']:.3f} [{est['low']:.3f}, {est['high']:.3f}]"
        if est is not None
        else "nothing paired"
    )
    flip = record["b_value"] < record["a_value"]
    ratios = [1 / r if flip else r for r in record["ratios"]]
    m = record["machine"]
    return (
        f"{what} paired tasks/h ratio over {len(ratios)} rounds (per round "
        f"{', '.join(f'{r:.3f}' for r in ratios)}; {m['cores']} cores, load "
        f"{min(record['load_1min'])}-{max(record['load_1min'])}, {record['recorded_at'][:10]})"
    )


def summary_line(record: dict[str, Any]) -> str:
    """One line: the knob's higher value against the lower, then `figure`."""
    values = sorted((record["a_value"], record["b_value"]))
    return f"{record['knob']} {values[1]} against {values[0]}, interleaved: {figure(record)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--gpu", default="cpu")
    parser.add_argument("--knob", required=True, help="NAME=VALUE: B is A with this changed")
    parser.add_argument("--config", default=None, help="A as JSON params (default: see above)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lock", default=None, help="flock this file around each server run")
    args = parser.parse_args()
    try:
        knob, value = _parse_knob(args.knob)
        a = json.loads(args.config) if args.config else dict(DEFAULT_A)
    except ValueError as exc:
        print(f"knob_ab: {exc}", file=sys.stderr)
        return 2
    if knob not in a:
        print(f"knob_ab: --knob {knob!r} is not a param of A ({sorted(a)})", file=sys.stderr)
        return 2
    if args.rounds < 2:
        print("knob_ab: --rounds must be at least 2 (one round cannot see drift)", file=sys.stderr)
        return 2
    b = {**a, knob: value}
    # Imported once the input is good: a bad argument is answered before vLLM is touched.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _evaluate import locked, request_for
    from _machine import machine_record
    from record_grid import PLANS

    from tuner.metrics import paired_ratio
    from tuner.models import prepare
    from tuner.settings import get_settings
    from tuner.study.space import config_key
    from tuner.study.trial.evaluate import evaluate

    preset = PLANS["large"].preset()
    cache = get_settings().cache_path()
    model_path = str(prepare(preset.model.prepare or args.model, cache))
    configs = {"A": a, "B": b}
    runs: dict[str, list[TrialResult]] = {"A": [], "B": []}
    loads: list[float] = []
    for n, name in enumerate(order(args.rounds)):
        params = configs[name]
        request = request_for(
            preset, params, model_path=model_path, cache_dir=cache, study="knob-ab", number=n
        )
        with locked(args.lock):
            loads.append(round(os.getloadavg()[0], 2))
            result = evaluate(request)
        if result.workload is None or result.failure_kind:
            print(f"run {n} ({name}) failed: {result.failure_reason}", file=sys.stderr)
            return 1
        runs[name].append(result)
        w = result.workload
        print(
            f"run {n + 1}/{2 * args.rounds} {name}: {w.tasks_per_hour:,.1f} tasks/h "
            f"({w.successes}/{w.tasks} in {w.scored_wall_s:.1f} s), start {result.startup_s:.0f}"
            f" s, load {loads[-1]}",
            flush=True,
        )
    tph = {k: [r.workload.tasks_per_hour for r in v if r.workload] for k, v in runs.items()}
    ratios = [y / x for x, y in zip(tph["A"], tph["B"], strict=True)]
    est = paired_ratio([_outcomes(r) for r in runs["B"]], [_outcomes(r) for r in runs["A"]])
    machine = machine_record()
    record = {
        "knob": knob,
        "a_value": a[knob],
        "b_value": value,
        "a": config_key(a),
        "b": config_key(b),
        "order": order(args.rounds),
        "tasks_per_hour": tph,
        "ratios": ratios,
        "log_ratio_sd": statistics.stdev(math.log(r) for r in ratios),
        "paired": None
        if est is None
        else {"ratio": est.ratio, "low": est.low, "high": est.high, "p_value": est.p_value},
        "start_s": {k: [round(r.startup_s, 1) for r in v] for k, v in runs.items()},
        "load_1min": loads,
        "machine": machine,
        "recorded_at": machine["recorded_at"],
        "command": " ".join(["python", "benchmarks/knob_ab.py", *sys.argv[1:]]),
        "mode": preset.workload.mode,
    }
    path = data_path(args.model, args.gpu)
    path.write_text(json.dumps([*records(path), record], indent=2) + "\n")
    print(summary_line(record))
    print(f"recorded in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
