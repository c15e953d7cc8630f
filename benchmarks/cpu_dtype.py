"""bf16 or fp32, eager or compiled: which serves SmolLM2 fastest on this CPU? Fresh starts.

vLLM's CPU build serves in bf16 by default. Where the CPU lacks AVX-512 bf16 instructions
(a Zen 3, for one) its oneDNN bf16 linear layers cannot be built ("Failed to create oneDNN
linear, fallback to torch linear" in the worker's log) and prefill there ran at about a
fourteenth of a Zen 4's (the calibration probe: 69 against 915-1,035 prompt tokens/s, 2 cores
each). This script starts the same server (no speculation, 2 GB of KV cache, both cores) under
each variant, a round at a time in a rotated order, and measures each fresh start with the
study's own calibration probe (`tuner.workload.calibration.measure_speeds`: prefill of 1,024-
token prompts, decode at 2 concurrent streams): the start, prefill tokens/s, decode tokens/s.
Per variant against the first it prints the paired ratio of each rate (geometric mean over the
rounds, with the rounds' range). It appends a record (variants, runs, machine with its CPU
flags) to benchmarks/data/cpu-dtype-smollm2-135m.json; docs/vllm-facts.md quotes it.

    python benchmarks/cpu_dtype.py [--rounds 2] [--variants bf16-eager,fp32-eager,...]
        [--lock /tmp/tuner-heavy.lock]

fp32 doubles the KV cache's bytes per token (46,080 instead of 23,040 for this model), so a
KV size in bytes holds half the tokens; the probe's few requests fit either way. One real-vLLM
job at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._machine import load_average, machine_record  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "cpu-dtype-smollm2-135m.json"
KV_BYTES = 2_000_000_000
STREAMS = 2
# name -> arguments added to the server's command line.
VARIANTS: dict[str, tuple[str, ...]] = {
    "bf16-eager": ("--enforce-eager",),
    "fp32-eager": ("--enforce-eager", "--dtype", "float32"),
    "bf16-compiled": (),
    "fp32-compiled": ("--dtype", "float32"),
}
ENV = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_USE_AOT_COMPILE": "0"}


def rotated(names: list[str], rounds: int) -> list[list[str]]:
    """Round r runs the variants starting at the r-th (a steady drift falls on each alike)."""
    return [names[r % len(names) :] + names[: r % len(names)] for r in range(rounds)]


def paired(runs: list[dict[str, Any]], name: str, first: str, key: str) -> dict[str, float]:
    """Geometric mean and range over the rounds of `name`'s `key` over `first`'s."""
    by_round: dict[int, dict[str, float]] = {}
    for run in runs:
        by_round.setdefault(run["round"], {})[run["variant"]] = run[key]
    ratios = [r[name] / r[first] for r in by_round.values() if name in r and first in r]
    if not ratios:
        return {}
    gm = math.exp(statistics.fmean(math.log(x) for x in ratios))
    return {"ratio": round(gm, 3), "low": round(min(ratios), 3), "high": round(max(ratios), 3)}


def summary(record: dict[str, Any]) -> list[str]:
    """The table this script prints: per variant the medians and the ratios to the first."""
    names = record["variants"]
    first = names[0]
    lines = [
        f"{'variant':<15} {'start s':>8} {'prefill tok/s':>14} {'decode tok/s':>13}   "
        f"prefill x / decode x / start x (vs {first}, over {record['rounds']} rounds)"
    ]
    for name in names:
        runs = [r for r in record["runs"] if r["variant"] == name]
        if not runs:
            continue
        med = {k: statistics.median(r[k] for r in runs) for k in ("start_s", "prefill", "decode")}
        cells = []
        for key in ("prefill", "decode", "start_s"):
            p = paired(record["runs"], name, first, key)
            cells.append(f"x{p['ratio']:.2f} [{p['low']:.2f}-{p['high']:.2f}]" if p else "-")
        lines.append(
            f"{name:<15} {med['start_s']:>8.1f} {med['prefill']:>14.1f} {med['decode']:>13.1f}   "
            + " / ".join(cells)
        )
    return lines


def one_run(model: Path, name: str, log_dir: Path) -> dict[str, Any]:
    """Start the server under `name`, probe it, stop it."""
    from tuner.server import Launcher, ServerSpec
    from tuner.workload.calibration import measure_speeds

    args = VARIANTS[name]
    at = args.index("--dtype") if "--dtype" in args else None
    spec = ServerSpec(
        model=str(model),
        served_model_name="smollm2",
        kv_cache_memory_bytes=KV_BYTES,
        # `--dtype` is a ServerSpec field; the rest are extra arguments.
        dtype=args[at + 1] if at is not None else None,  # type: ignore[arg-type]
        extra_args=args[:at] + args[at + 2 :] if at is not None else args,
        env=ENV,
    )
    launcher = Launcher(log_dir=log_dir)
    handle = launcher.launch(spec, timeout_s=900)
    try:
        speeds = measure_speeds(handle.base_url, "smollm2", streams=STREAMS)
        start_s = handle.facts.startup_seconds
    finally:
        handle.stop()
    return {
        "variant": name,
        "start_s": round(float(start_s or 0.0), 1),
        "prefill": round(speeds.prefill_tps, 1),
        "decode": round(speeds.decode_tps, 2),
        "probe_s": round(speeds.probe_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lock", default=None, help="flock this file around each server run")
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or len(names) < 2 or args.rounds < 1:
        print(
            f"cpu_dtype.py: --variants {args.variants!r}: give two or more of "
            f"{', '.join(VARIANTS)} (ratios are against the first), and --rounds >= 1",
            file=sys.stderr,
        )
        return 2

    from tuner.models import prepare
    from tuner.settings import get_settings

    cache = get_settings().cache_path()
    model = prepare("smollm2-135m", cache)
    log_dir = cache / "logs" / "cpu-dtype"
    machine = machine_record()
    runs: list[dict[str, Any]] = []
    order = rotated(names, args.rounds)
    total = sum(len(o) for o in order)
    for r, names_r in enumerate(order):
        for name in names_r:
            with contextlib.ExitStack() as stack:
                if args.lock:
                    f = stack.enter_context(open(args.lock, "a"))
                    fcntl.flock(f, fcntl.LOCK_EX)
                load = load_average()
                run = {"round": r, **one_run(model, name, log_dir), "load": load}
            runs.append(run)
            print(
                f"[{len(runs)}/{total}] round {r + 1} {name}: started in {run['start_s']} s, "
                f"prefill {run['prefill']} tok/s, decode {run['decode']} tok/s "
                f"({STREAMS} streams), load {load}",
                flush=True,
            )
    record = {
        "model": "smollm2-135m",
        "variants": names,
        "rounds": args.rounds,
        "kv_cache_memory_bytes": KV_BYTES,
        "env": ENV,
        "args": {n: list(VARIANTS[n]) for n in names},
        "machine": machine,
        "runs": runs,
    }
    record["summary"] = summary(record)
    print("\n".join(record["summary"]))
    old = json.loads(DATA.read_text()) if DATA.exists() else []
    DATA.write_text(json.dumps([*old, record], indent=1) + "\n")
    print(f"appended to {DATA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
