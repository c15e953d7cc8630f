"""Is a run's shift the server start's or the hour's? Several scored windows on each of several
starts of one config.

The replay's noise (benchmarks/_grid_replay.py) is mostly a factor shared by a whole run: in the
recorded grids' repeats the window's mean moves about 6.8% from run to run and the tasks' own
scatter is 1.7% of the variance (docs/decisions.md). Whether that factor belongs to the start
(where vLLM's threads, memory and compiled graphs landed) or to the time (what else the box
does) decides what a repeat must cost: a second window on the same server costs a window; a
second start costs a start, a warm-up and the after-work as well.

Each start of the baseline config (the preset's, on the real vLLM build, through tuner's own
`Launcher` and `run_workload_sync`) plays `--windows` scored windows back to back, window w with
task seed w (the same seeds in every start, so window w's tasks are the same in each start);
only the first has the preset's warm-up (its tasks and shape sweeps). Log tasks/h of start s,
window w is split as window effect + start effect + residual (two-way, no interaction):

- between starts: sd of the start effects (their spread less the residual's share);
- within a start: sd of the residual (a window's move on a server that stays up);
- a trend over the run order of the windows (the box's drift), reported beside them.

It prints the table (tasks/h per start and window) and the split, and writes
benchmarks/data/window-noise-<model>-<gpu>.json with every window and the machine.

`--pair D,LO,HI` asks what a repeat without a restart would give a comparison: the baseline (A)
and an n-gram config (B) are started once each and both kept up (an idle CPU server draws about
2% of a core), then every round plays one window on each, seed r in round r on both (the same
tasks, so the round pairs by task), A first in even rounds and B first in odd ones. Each
round's log(B/A) is one paired ratio; their spread is what a round costs in noise at a
window's price, to set beside `benchmarks/repeatability.py`'s fresh-start rounds (a record of
those from the same box is kept in this file too, not in repeatability-*.json, whose quietest
machine `benchmarks/noise_model.py` makes decision_sim's x1).

    python -m benchmarks.window_noise [--starts 5] [--windows 4] [--lock /tmp/tuner-heavy.lock]
    python -m benchmarks.window_noise --reanalyse   # the stored records' tables and splits again
    python -m benchmarks.window_noise --pair 3,2,3 --rounds 8 [--lock /tmp/tuner-heavy.lock]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks._evaluate import locked
from benchmarks._machine import baseline_and_ngram, load_average, machine_record
from tuner.server.launcher import Launcher
from tuner.settings import get_settings
from tuner.study import load_preset
from tuner.study.preflight.dtype import resolve_dtype
from tuner.workload import run_workload_sync

ROOT = Path(__file__).resolve().parent.parent


def split(log_tph: list[list[float]]) -> dict[str, float]:
    """Two-way split of `log_tph[start][window]` (no interaction): the sd between starts (its
    method-of-moments estimate, 0 when the residual explains the whole spread), within a start
    (the residual's), and the windows' own (their means' spread)."""
    s_n, w_n = len(log_tph), len(log_tph[0])
    grand = statistics.fmean(x for row in log_tph for x in row)
    start_mean = [statistics.fmean(row) for row in log_tph]
    window_mean = [statistics.fmean(row[w] for row in log_tph) for w in range(w_n)]
    resid = [
        log_tph[s][w] - start_mean[s] - window_mean[w] + grand
        for s in range(s_n)
        for w in range(w_n)
    ]
    df = (s_n - 1) * (w_n - 1)
    within_var = sum(r * r for r in resid) / df
    starts_var = statistics.variance(start_mean) if s_n > 1 else 0.0
    between_var = max(0.0, starts_var - within_var / w_n)
    windows_var = statistics.variance(window_mean) if w_n > 1 else 0.0
    return {
        "between_start_sd": math.sqrt(between_var),
        "within_start_sd": math.sqrt(within_var),
        "start_means_sd": math.sqrt(starts_var),
        "window_means_sd": math.sqrt(windows_var),
        "residual_df": df,
    }


def trend_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log tasks/h against hours since the first window."""
    t0 = points[0][0]
    xs = [(t - t0) / 3600.0 for t, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def one_start(preset: Any, params: dict[str, Any], model_path: str, windows: int) -> dict[str, Any]:
    """One server start of `params` playing `windows` scored windows; its records."""
    cache = get_settings().cache_path()
    launcher = Launcher(
        log_dir=cache / "logs" / "window-noise", state_dir=cache / "run", cache_dir=cache
    )
    spec = preset.server_spec(params, model_path=model_path)
    t0 = time.monotonic()
    handle = launcher.launch(spec, timeout_s=preset.startup_timeout_s)
    started = time.monotonic() - t0
    out: list[dict[str, Any]] = []
    with handle:
        for w in range(windows):
            settings = preset.workload.model_copy(
                update={"seed": w, **({} if w == 0 else {"warmup_tasks": 0})}
            )
            record = run_workload_sync(
                handle.base_url,
                spec.served_model_name or spec.model,
                settings,
                tokenizer=model_path if Path(model_path).is_dir() else None,
                block_size=handle.facts.block_size,
            )
            out.append(
                {
                    "window": w,
                    "ended_at": time.time(),
                    "tasks_per_hour": record.tasks_per_hour,
                    "scored_wall_s": record.scored_wall_s,
                    "load_1min": load_average()[0],
                }
            )
            print(
                f"  window {w} (seed {w}): {record.tasks_per_hour:,.0f} tasks/h in "
                f"{record.scored_wall_s:.1f} s",
                flush=True,
            )
    return {"startup_s": started, "windows": out}


def _window(handle: Any, spec: Any, preset: Any, model_path: str, seed: int, warm: bool) -> Any:
    settings = preset.workload.model_copy(
        update={"seed": seed, **({} if warm else {"warmup_tasks": 0})}
    )
    return run_workload_sync(
        handle.base_url,
        spec.served_model_name or spec.model,
        settings,
        tokenizer=model_path if Path(model_path).is_dir() else None,
        block_size=handle.facts.block_size,
    )


def hot_pair(
    preset: Any, configs: dict[str, dict[str, Any]], model_path: str, rounds: int
) -> dict[str, Any]:
    """A and B started once each and kept up; `rounds` rounds of one window on each (seed r,
    alternating which goes first); the first window of each has the preset's warm-up."""
    cache = get_settings().cache_path()
    launcher = Launcher(
        log_dir=cache / "logs" / "window-noise", state_dir=cache / "run", cache_dir=cache
    )
    specs = {n: preset.server_spec(c, model_path=model_path) for n, c in configs.items()}
    handles = {}
    started = {}
    try:
        for name, spec in specs.items():
            t0 = time.monotonic()
            handles[name] = launcher.launch(spec, timeout_s=preset.startup_timeout_s)
            started[name] = time.monotonic() - t0
        out: list[dict[str, Any]] = []
        for r in range(rounds):
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            row: dict[str, Any] = {"round": r, "order": "".join(order)}
            for name in order:
                record = _window(handles[name], specs[name], preset, model_path, r, r == 0)
                row[name] = record.tasks_per_hour
                row[f"{name}_ended_at"] = time.time()
            row["log_ratio"] = math.log(row["B"] / row["A"])
            out.append(row)
            print(
                f"  round {r} ({row['order']}): A {row['A']:,.0f}, B {row['B']:,.0f} tasks/h, "
                f"B/A x{row['B'] / row['A']:.3f}",
                flush=True,
            )
    finally:
        for handle in handles.values():
            handle.stop()
    return {"startup_s": started, "rounds": out}


def analyse_pair(pair: dict[str, Any]) -> dict[str, float]:
    """The rounds' log ratios: mean, sd and a t-interval, the first round (warm-up) apart too."""
    from scipy import stats

    logs = [r["log_ratio"] for r in pair["rounds"]]
    n = len(logs)
    sd = statistics.stdev(logs) if n > 1 else 0.0
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) if n > 1 else math.inf
    mean = statistics.fmean(logs)
    later = logs[1:]
    parts = {
        "rounds": n,
        "ratio": math.exp(mean),
        "ratio_low": math.exp(mean - half),
        "ratio_high": math.exp(mean + half),
        "round_sd": sd,
        "round_sd_after_first": statistics.stdev(later) if len(later) > 1 else 0.0,
        "a_window_sd": statistics.stdev([math.log(r["A"]) for r in pair["rounds"]]),
    }
    print(
        f"B/A over {n} rounds: x{parts['ratio']:.3f} [{parts['ratio_low']:.3f}, "
        f"{parts['ratio_high']:.3f}]; sd of a round's log ratio {sd:.4f} "
        f"({parts['round_sd_after_first']:.4f} without the warm-up round)"
    )
    return parts


def analyse(starts: list[dict[str, Any]]) -> dict[str, float]:
    """Print the table and the split of `starts` (`one_start`'s records); return the split.
    The trend is fitted to each window's log tasks/h less its window's mean over the starts
    (the seeds' own difference would otherwise read as a trend within every start)."""
    log_tph = [[math.log(w["tasks_per_hour"]) for w in s["windows"]] for s in starts]
    parts = split(log_tph)
    n_windows = len(log_tph[0])
    window_mean = [statistics.fmean(row[w] for row in log_tph) for w in range(n_windows)]
    order = [
        (w["ended_at"], log_tph[i][j] - window_mean[j])
        for i, s in enumerate(starts)
        for j, w in enumerate(s["windows"])
    ]
    parts["trend_per_hour"] = trend_per_hour(sorted(order))
    print("tasks/h, one row per start, one column per window (seed):")
    for i, run in enumerate(starts):
        cells = "  ".join(f"{w['tasks_per_hour']:7,.0f}" for w in run["windows"])
        print(f"  start {i + 1} ({run['startup_s']:5.1f} s): {cells}")
    print(
        f"sd of log tasks/h: between starts {parts['between_start_sd']:.4f}, within a start "
        f"{parts['within_start_sd']:.4f} ({parts['residual_df']} df), start means "
        f"{parts['start_means_sd']:.4f}, window means {parts['window_means_sd']:.4f}; trend "
        f"{100 * parts['trend_per_hour']:+.1f}%/h over the run order (window effects removed)"
    )
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--gpu", default="cpu")
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--lock", default=None, help="flock this file around each start")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--reanalyse", action="store_true", help="run nothing: split the file's records again"
    )
    parser.add_argument("--pair", help="D,LO,HI: kept-up A/B rounds against this n-gram config")
    parser.add_argument("--rounds", type=int, default=8, help="--pair's rounds")
    args = parser.parse_args()
    path = args.json or ROOT / "benchmarks" / "data" / f"window-noise-{args.model}-{args.gpu}.json"
    records = json.loads(path.read_text()) if path.is_file() else []
    if args.reanalyse:
        for record in records:
            m = record["machine"]
            when = m.get("recorded_at", "")
            print(f"\n{m.get('cpu_model')} {m.get('cpu_family_model')} ({when}):")
            if "fresh_rounds" in record:  # benchmarks/repeatability.py's record, kept beside
                fresh = record["fresh_rounds"]
                ratios = ", ".join(f"{r:.3f}" for r in fresh["paired_ratios"])
                print(
                    f"fresh-start rounds (benchmarks.repeatability): B/A {ratios}, CV "
                    f"{100 * fresh['cv_paired_ratio']:.1f}%"
                )
            elif "pair" in record:
                record["split"] = analyse_pair(record["pair"])
            else:
                record["split"] = analyse(record["starts"])
        path.write_text(json.dumps(records, indent=1) + "\n")
        return 0
    preset, _ = resolve_dtype(load_preset(model=args.model, gpu=args.gpu))
    if args.pair:
        model_path, base, ngram = baseline_and_ngram(preset, args.pair)
        print(f"A {base}, B {ngram}: both kept up, {args.rounds} rounds", flush=True)
        with locked(args.lock):
            pair = hot_pair(preset, {"A": base, "B": ngram}, model_path, args.rounds)
        records.append(
            {
                "machine": machine_record(),
                "configs": {"A": base, "B": ngram},
                "workload": preset.workload.model_dump(mode="json"),
                "pair": pair,
                "split": analyse_pair(pair),
            }
        )
        path.write_text(json.dumps(records, indent=1) + "\n")
        print(f"wrote {path}")
        return 0
    model_path, base, _ = baseline_and_ngram(preset, "2,1,4")
    starts: list[dict[str, Any]] = []
    for s in range(args.starts):
        print(f"start {s + 1} of {args.starts}: {base}", flush=True)
        with locked(args.lock):
            starts.append(one_start(preset, base, model_path, args.windows))
        print(f"  started in {starts[-1]['startup_s']:.1f} s", flush=True)
    print()
    parts = analyse(starts)
    records.append(
        {
            "machine": machine_record(),
            "config": base,
            "workload": preset.workload.model_dump(mode="json"),
            "starts": starts,
            "split": parts,
        }
    )
    path.write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
