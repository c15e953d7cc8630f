"""Which process settings make vLLM's CPU build fastest here? Variants interleaved, fresh starts.

vLLM's CPU worker binds its OpenMP threads to all cores but one, which it reserves for the
engine process (`VLLM_CPU_NUM_OF_RESERVED_CPU`, default 1 per rank): on a 2-core box the model
runs on one core. Its docs also ask for tcmalloc and Intel OpenMP in LD_PRELOAD, and every
trial pays torch.compile's start-up unless `--enforce-eager` skips it. This script runs the
CPU preset's baseline config under each variant, a round at a time, each round in a rotated
order (so a steady drift falls on every variant alike), every run a fresh server start through
the same `evaluate()` a study worker calls. Per variant it prints the start time and the
tasks/h, and per variant against `default` the paired tasks/h ratio over the rounds with its
interval (`tuner.metrics.paired_ratio`, the export rule's own test, between-run term
included). It appends a record (variants, runs, ratios, machine, load) to
benchmarks/data/cpu-settings-<model>-cpu.json; docs/vllm-facts.md quotes it.

    python benchmarks/cpu_settings.py [--rounds 3] [--no-warmup] [--variants default,both-cores,...]
        [--config JSON] [--lock /tmp/tuner-heavy.lock]

Replay workload: load shape, not graded answers. One real-vLLM job at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
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
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
# Intel OpenMP as the `intel-openmp` wheel installs it: <prefix>/lib/libiomp5.so.
IOMP = str(Path(sys.prefix) / "lib" / "libiomp5.so")

# name -> (environment added to the preset's, arguments added to the server's command line).
VARIANTS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    # vLLM's own default, spelled out: the CPU presets now set 0 (the winner of this script).
    "default": ({"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}, ()),
    "both-cores": ({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, ()),
    "both-cores+preload": (
        {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "LD_PRELOAD": f"{TCMALLOC}:{IOMP}"},
        (),
    ),
    "both-cores+eager": ({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, ("--enforce-eager",)),
}


def data_path(model: str) -> Path:
    """Where this preset's records of the settings comparison go."""
    return DATA_DIR / f"cpu-settings-{model}-cpu.json"


def records(path: Path) -> list[dict[str, Any]]:
    """Every record the file holds (none when it does not exist)."""
    return json.loads(path.read_text()) if path.is_file() else []


def rotated(names: list[str], rounds: int) -> list[list[str]]:
    """Round r runs `names` rotated left by r: each variant takes each place in turn."""
    return [names[r % len(names) :] + names[: r % len(names)] for r in range(rounds)]


def missing_libraries(names: list[str]) -> list[str]:
    """The preloaded libraries that the chosen variants name and this machine lacks."""
    wanted = {
        lib for name in names for lib in VARIANTS[name][0].get("LD_PRELOAD", "").split(":") if lib
    }
    return sorted(lib for lib in wanted if not Path(lib).is_file())


def _outcomes(result: TrialResult) -> RunOutcomes:
    from tuner.metrics import RunOutcomes

    assert result.workload is not None
    return RunOutcomes.of(result.workload.task_records, result.workload.scored_wall_s)


def summary_lines(record: dict[str, Any]) -> list[str]:
    """One line per variant: median start, median tasks/h, paired ratio to `default`."""
    lines = []
    for name in record["variants"]:
        tph = record["tasks_per_hour"][name]
        starts = record["start_s"][name]
        line = (
            f"{name:20s} start {statistics.median(starts):6.1f} s  "
            f"tasks/h {statistics.median(tph):8.1f} (runs: {', '.join(f'{x:.0f}' for x in tph)})"
        )
        est = record["paired"].get(name)
        if est is not None:
            line += (
                f"  x{est['ratio']:.3f} [{est['low']:.3f}, {est['high']:.3f}] vs default "
                f"(per round {', '.join(f'{r:.3f}' for r in record['ratios'][name])})"
            )
        lines.append(line)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--config", default=None, help="the config as JSON params (default: the preset's baseline)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lock", default=None, help="flock this file around each server run")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the unrecorded first start that fills the compile caches",
    )
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or "default" not in names:
        print(
            f"cpu_settings: --variants {args.variants!r}: unknown {unknown} or no 'default'; "
            f"choose from {', '.join(VARIANTS)} (default is required: ratios are against it)",
            file=sys.stderr,
        )
        return 2
    if args.rounds < 2:
        print(
            "cpu_settings: --rounds must be at least 2 (one round cannot see drift)",
            file=sys.stderr,
        )
        return 2
    try:
        config = json.loads(args.config) if args.config else None
    except ValueError as exc:
        print(f"cpu_settings: --config is not JSON: {exc}", file=sys.stderr)
        return 2
    missing = missing_libraries(names)
    if missing:
        print(
            f"cpu_settings: {', '.join(missing)} not found; install libtcmalloc-minimal4 "
            "(Debian) and intel-openmp (pip), or leave out the preload variant",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _evaluate import locked, request_for
    from _machine import machine_record

    from tuner.metrics import paired_ratio
    from tuner.models import prepare
    from tuner.settings import get_settings
    from tuner.study.space import load_preset
    from tuner.study.trial.evaluate import evaluate

    preset = load_preset(model=args.model, gpu="cpu")
    if config is None:
        config = preset.baseline_params()
    cache = get_settings().cache_path()
    model_path = str(prepare(preset.model.prepare or args.model, cache))
    plan = rotated(names, args.rounds)
    runs: dict[str, list[TrialResult]] = {n: [] for n in names}
    loads: list[float] = []
    total = len(names) * args.rounds
    n = 0
    if not args.no_warmup:
        # A cold torch.compile cache costs the first start a minute or more; no variant pays it.
        request = request_for(
            preset, config, model_path=model_path, cache_dir=cache, study="cpu-settings", number=0
        )
        with locked(args.lock):
            warm = evaluate(request)
        if warm.workload is None or warm.failure_kind:
            print(f"warm-up start failed: {warm.failure_reason}", file=sys.stderr)
            return 1
        print(f"warm-up start (not recorded): {warm.startup_s:.1f} s", flush=True)
    for order in plan:
        for name in order:
            env, extra = VARIANTS[name]
            request = request_for(
                preset,
                config,
                model_path=model_path,
                cache_dir=cache,
                study="cpu-settings",
                number=n,
            )
            spec = request.spec.model_copy(
                update={
                    "env": {**request.spec.env, **env},
                    "extra_args": (*request.spec.extra_args, *extra),
                }
            )
            request = dataclasses.replace(request, spec=spec)
            with locked(args.lock):
                loads.append(round(os.getloadavg()[0], 2))
                result = evaluate(request)
            n += 1
            if result.workload is None or result.failure_kind:
                print(f"run {n} ({name}) failed: {result.failure_reason}", file=sys.stderr)
                return 1
            runs[name].append(result)
            w = result.workload
            print(
                f"run {n}/{total} {name}: {w.tasks_per_hour:,.1f} tasks/h "
                f"({w.successes}/{w.tasks} in {w.scored_wall_s:.1f} s), start "
                f"{result.startup_s:.1f} s, load {loads[-1]}",
                flush=True,
            )
    tph = {k: [r.workload.tasks_per_hour for r in v if r.workload] for k, v in runs.items()}
    ratios = {
        k: [y / x for x, y in zip(tph["default"], tph[k], strict=True)]
        for k in names
        if k != "default"
    }
    paired: dict[str, Any] = {}
    for k in ratios:
        est = paired_ratio([_outcomes(r) for r in runs[k]], [_outcomes(r) for r in runs["default"]])
        paired[k] = (
            None
            if est is None
            else {"ratio": est.ratio, "low": est.low, "high": est.high, "p_value": est.p_value}
        )
    machine = machine_record()
    record = {
        "config": config,
        "variants": names,
        "settings": {k: {"env": VARIANTS[k][0], "args": list(VARIANTS[k][1])} for k in names},
        "order": plan,
        "tasks_per_hour": tph,
        "start_s": {k: [round(r.startup_s, 1) for r in v] for k, v in runs.items()},
        "ratios": ratios,
        "log_ratio_sd": {
            k: statistics.stdev(math.log(r) for r in v) for k, v in ratios.items() if len(v) > 1
        },
        "paired": paired,
        "load_1min": loads,
        "machine": machine,
        "recorded_at": machine["recorded_at"],
        "command": " ".join(["python", "benchmarks/cpu_settings.py", *sys.argv[1:]]),
        "mode": preset.workload.mode,
    }
    path = data_path(args.model)
    path.write_text(json.dumps([*records(path), record], indent=2) + "\n")
    print("\n".join(summary_lines(record)))
    print(f"recorded in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
