"""What a trial costs beyond the two things it exists for: starting the server, scoring it.

Runs one real trial of the CPU preset (vLLM CPU build, SmolLM2, SQLite, replay) through the
whole machinery — driver, Ray worker, launcher, workload, storage — and prints, from that same
run, each part's seconds and

    overhead = (trial wall time - server startup - scored workload) / trial wall time

(goal: at most 0.05). The trial wall time is the driver's (Optuna's start to complete). The
overhead includes warm-up tasks, metric scrapes, stopping the server, Ray and the database; a
second ratio leaves out the optional plain-throughput benchmark, which is a measurement too.

    python benchmarks/trial_overhead.py [--model smollm2-135m --gpu cpu] [--no-throughput]
        [--no-warmup]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import optuna
from rich.console import Console
from rich.table import Table

from tuner.attrs import TrialAttr
from tuner.settings import get_settings
from tuner.storage import Store
from tuner.study import OptimizeOptions, load_preset, optimize


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--gpu", default="cpu")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--no-warmup", action="store_true")
    args = parser.parse_args()

    preset = load_preset(model=args.model, gpu=args.gpu)
    if args.no_throughput:
        preset = preset.model_copy(update={"throughput_streams": ()})
    if args.no_warmup:
        workload = preset.workload.model_copy(update={"warmup_tasks": 0})
        preset = preset.model_copy(update={"workload": workload})
    workdir = Path(tempfile.mkdtemp(prefix="tuner-overhead-"))
    url = f"sqlite:///{workdir / 'bench.db'}"
    options = OptimizeOptions(
        storage_url=url,
        cache_dir=get_settings().cache_path(),
        study_name="overhead",
        n_trials=1,
        show_progress=False,
    )
    optimize(preset, options)
    (trial,) = optuna.load_study(study_name="overhead", storage=url).trials
    if trial.state != optuna.trial.TrialState.COMPLETE:
        print(f"the trial did not complete: {trial.state.name} {trial.user_attrs}")
        return 1
    assert trial.datetime_start is not None and trial.datetime_complete is not None
    wall = (trial.datetime_complete - trial.datetime_start).total_seconds()
    timing = trial.user_attrs[TrialAttr.TIMING]
    store = Store(url)
    (run,) = store.workload_runs("overhead", trial.number)
    store.close()
    scored = run.record.scored_wall_s
    startup = timing["startup_s"]
    warmup_and_scrapes = timing["workload_s"] - scored
    throughput = timing["throughput_s"]
    rest = wall - startup - timing["workload_s"] - throughput

    table = Table(title=f"one trial of {args.model} x {args.gpu} ({run.record.tasks} tasks)")
    table.add_column("part")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for name, seconds in (
        ("server startup (launch to /health)", startup),
        ("scored workload", scored),
        ("warm-up tasks and /metrics scrapes", warmup_and_scrapes),
        ("plain throughput benchmark (1 and 8 streams)", throughput),
        ("stop, Ray dispatch, storage, driver", rest),
        ("trial wall time (driver)", wall),
    ):
        table.add_row(name, f"{seconds:.2f}", f"{seconds / wall:.1%}")
    Console().print(table)
    overhead = (wall - startup - scored) / wall
    without_bench = (wall - throughput - startup - scored) / (wall - throughput)
    print(f"overhead = (wall - startup - scored) / wall = {overhead:.3f}  (goal <= 0.05)")
    print(f"overhead without the plain benchmark = {without_bench:.3f}")
    print(f"tuner's own machinery (stop, Ray, storage, driver) = {rest / wall:.3f} of the trial")
    print(f"study kept in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
