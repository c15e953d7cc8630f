"""The run-to-run noise of the real vLLM CPU build, fitted to every recorded run.

`benchmarks/decision_sim.py` draws its simulated studies from this model; the product does not
read it (its prior is the preset's `between_run`, else `tuner.metrics.DEFAULT_NOISE`), so the
simulation checks the product against the machines, not against the product's own constant.

What it reads: every `benchmarks/data/grid-*.json` (each a session: one recording on one
machine; only configs started more than once carry noise) and every record of every
`benchmarks/data/repeatability-*-cpu.json` (each record a session of interleaved rounds A B A
B ...; GPU records such as repeatability-qwen3.8-27b-shape-h200.json are the GPU's noise,
docs/gpu-validation.md). A new recording dropped there is fitted on the next run; nothing is
listed by hand.
(The real A/A study of docs/decisions.md left no data file, only four tasks/h in prose, so it
is not fitted.)

The model of log tasks/h y of start j of config c in session s, at hours t since the session
began (and run index i, the start's place in the session's order):

    y = mu_c + drift_s * t + scale_s * e,   e ~ Student t(nu)

- `drift_s` (per hour and, separately, per run index) is fitted within configs (each config's
  starts against their own mean time), so config effects cannot leak into it;
- `scale_s` is what the starts leave after the drift: its sd is the between-start sd of the
  session, with a chi-square 95% interval; the pooled value over sessions is the same with the
  degrees of freedom added;
- `nu` (the run-level tails) is a maximum-likelihood fit of a Student t to every session's
  standardized residuals, with a profile-likelihood 95% interval;
- within a run every task's log duration moves by its own jitter around the run's shift: the
  task sd (grids only: repeatability records keep no tasks), per session and pooled;
- the start-up effect: how a config's first start differs from its later starts (after drift),
  a mean over configs with a t-interval;
- the machine (CPU family/model, or what the file says) is a factor: every session names its
  machine, and sessions are pooled per machine as well.

The simulation's x1 is the quietest machine: the machine whose sessions' pooled between-start sd
(after drift) is the smallest, with its task jitter; every session's sd is also stated as a
multiple of it ("level"), which is where the x1-x6 of the simulation come from. Drift is stated
in sds per hour of its own session, so it grows with the noise when the simulation scales it;
the simulation draws a study's slope with the root mean square of the sessions' (weighed by the
hours each spanned).

    python -m benchmarks.noise_model             # writes benchmarks/data/noise-model.json
    python -m benchmarks.noise_model --no-write  # prints it
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, stats

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"
OUT = DATA / "noise-model.json"
CONFIDENCE = 0.95


@dataclass
class Start:
    """One fresh server start that completed its tasks."""

    config: str
    log_tph: float
    hours: float  # since the session's first start
    index: int  # place in the session's order
    wall_s: float | None = None
    task_logs: dict[int, float] | None = None  # task position -> log seconds


@dataclass
class Session:
    """One recording on one machine."""

    name: str
    machine: str
    max_load_per_core: float | None  # rounded to 2 digits
    starts: list[Start] = field(default_factory=list)


def _config(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def _machine(cpu: Any, fallback: str) -> str:
    if isinstance(cpu, dict) and cpu.get("cpu_family_model"):
        return f"{cpu.get('cpu_model', 'cpu')} {cpu['cpu_family_model']}"
    return fallback


def _grid_session(path: Path) -> Session:
    data = json.loads(path.read_text())
    machine = _machine(data.get("cpu"), f"unrecorded ({data.get('machine', 'unknown')})")
    runs = [
        r for r in data["runs"] if r.get("failure_kind") is None and r.get("tasks_per_hour", 0) > 0
    ]
    runs.sort(key=lambda r: r["recorded_at"])
    times = [datetime.fromisoformat(r["recorded_at"].replace("Z", "+00:00")) for r in runs]
    loads = [max(r["load_1min"]) for r in runs if r.get("load_1min")]
    cores = (data.get("cpu") or {}).get("cores", 2)
    session = Session(path.name, machine, round(max(loads) / cores, 2) if loads else None)
    for i, (r, when) in enumerate(zip(runs, times, strict=True)):
        tasks = {k: math.log(t[2]) for k, t in enumerate(r.get("tasks") or []) if t[2] > 0}
        config, tph = _config(r["params"]), math.log(r["tasks_per_hour"])
        hours = (when - times[0]).total_seconds() / 3600
        session.starts.append(Start(config, tph, hours, i, r.get("wall_s"), tasks or None))
    return session


def _repeatability_sessions(path: Path) -> list[Session]:
    data = json.loads(path.read_text())
    out = []
    for n, rec in enumerate(data if isinstance(data, list) else [data]):
        machine = _machine(rec.get("machine"), "unrecorded (vm 2 cores)")
        cores = (rec.get("machine") or {}).get("cores", 2)
        loads = rec.get("load_average_at_start") or []
        load = round(max(loads) / cores, 2) if loads else None
        session = Session(f"{path.name}[{n}]", machine, load, [])
        names = sorted(rec["tasks_per_hour"])
        rounds = len(rec["tasks_per_hour"][names[0]])
        hours, index = 0.0, 0
        # benchmarks/repeatability.py runs its rounds interleaved: A B, A B, ...
        for r in range(rounds):
            for name in names:
                seconds = rec.get("run_seconds", {}).get(name, [None] * rounds)[r]
                config = _config(rec["configs"][name])
                tph = math.log(rec["tasks_per_hour"][name][r])
                session.starts.append(Start(config, tph, hours, index, seconds))
                hours += (seconds or 0.0) / 3600
                index += 1
        out.append(session)
    return out


def load_sessions(data_dir: Path = DATA) -> list[Session]:
    """Every recorded session in `data_dir` (see the module docstring)."""
    # grid-truth-*.json is the fit of the grids (benchmarks/grid_truth.py), not a recording.
    grids = [
        p for p in sorted(data_dir.glob("grid-*.json")) if not p.name.startswith("grid-truth-")
    ]
    sessions = [_grid_session(p) for p in grids]
    for p in sorted(data_dir.glob("repeatability-*-cpu.json")):
        sessions += _repeatability_sessions(p)
    return sessions


def _rounded(values: Any, digits: int = 4) -> list[float]:
    return [round(v, digits) for v in values]


def _sd_interval(ss: float, df: int) -> list[float]:
    """The chi-square interval of an sd from its sum of squares and degrees of freedom."""
    a = (1 - CONFIDENCE) / 2
    return _rounded(math.sqrt(ss / stats.chi2.ppf(q, df)) for q in (1 - a, a))


def _slope_fit(groups: list[list[Start]], key: str) -> dict[str, Any]:
    """Within-config regression of log tasks/h on `key` (hours or index); the residuals are
    per group."""
    sxx = sxy = 0.0
    centred = []
    for g in groups:
        xs = [float(getattr(s, key)) for s in g]
        ys = [s.log_tph for s in g]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        d = [(x - mx, y - my) for x, y in zip(xs, ys, strict=True)]
        sxx += sum(dx**2 for dx, _ in d)
        sxy += sum(dx * dy for dx, dy in d)
        centred.append(d)
    slope = sxy / sxx if sxx > 0 else 0.0
    resid = [[dy - slope * dx for dx, dy in d] for d in centred]
    df = sum(len(g) for g in groups) - len(groups) - (1 if sxx > 0 else 0)
    ss = sum(r * r for g in resid for r in g)
    out: dict[str, Any] = {"slope": slope, "df": df, "ss": ss, "residuals": resid}
    if sxx > 0 and df > 0:
        se = math.sqrt(ss / df / sxx)
        t = stats.t.ppf(1 - (1 - CONFIDENCE) / 2, df)
        out["interval"] = [slope - t * se, slope + t * se]
    return out


def _repeated(session: Session) -> list[list[Start]]:
    by: dict[str, list[Start]] = {}
    for s in session.starts:
        by.setdefault(s.config, []).append(s)
    return [g for g in by.values() if len(g) >= 2]


def _task_sd(groups: list[list[Start]]) -> tuple[float, int] | None:
    """Within-run task jitter: each task's log seconds less its mean over the config's starts
    and less the start's own shift; sd with its degrees of freedom."""
    ss, df = 0.0, 0
    for g in groups:
        runs = [s.task_logs for s in g if s.task_logs]
        if len(runs) < 2:
            continue
        keys = sorted(set.intersection(*(set(r) for r in runs)))
        m = np.array([[r[k] for k in keys] for r in runs])
        dev = m - m.mean(axis=0) - m.mean(axis=1, keepdims=True) + m.mean()
        ss += float((dev**2).sum())
        df += (m.shape[0] - 1) * (m.shape[1] - 1)
    return (math.sqrt(ss / df), df) if df else None


def _fit_t(z: np.ndarray) -> dict[str, Any]:
    """Maximum-likelihood Student t (location 0) of standardized residuals, with a profile
    likelihood 95% interval for nu."""

    def nll(nu: float) -> tuple[float, float]:
        res = optimize.minimize_scalar(
            lambda ls: -stats.t.logpdf(z, nu, scale=math.exp(ls)).sum(),
            bounds=(-5, 3),
            method="bounded",
        )
        return float(res.fun), math.exp(float(res.x))

    grid = np.exp(np.linspace(math.log(0.5), math.log(1000), 400))
    values = [nll(float(nu))[0] for nu in grid]
    best = int(np.argmin(values))
    nu = float(grid[best])
    cut = values[best] + stats.chi2.ppf(CONFIDENCE, 1) / 2
    inside = [float(g) for g, v in zip(grid, values, strict=True) if v <= cut]
    normal = float(-stats.norm.logpdf(z, scale=float(np.sqrt((z**2).mean()))).sum())
    return {
        "nu": round(nu, 2),
        "nu_interval": [round(min(inside), 2), round(max(inside), 2)],
        "nu_at_upper_limit": bool(max(inside) >= grid[-1] * 0.99),
        "scale": round(nll(nu)[1], 4),
        "residuals": int(z.size),
        "log_likelihood_gain_over_normal": round(normal - values[best], 3),
    }


def fit(sessions: list[Session]) -> dict[str, Any]:
    """The model's parameters with their intervals (see the module docstring)."""
    out_sessions = []
    z_all: list[float] = []
    first_gaps: list[float] = []
    for s in sessions:
        groups = _repeated(s)
        if not groups:
            continue
        hours = _slope_fit(groups, "hours")
        index = _slope_fit(groups, "index")
        plain = _slope_fit(
            [[Start(x.config, x.log_tph, 0.0, 0) for x in g] for g in groups], "hours"
        )
        # Drift per hour, and the sd the starts leave after it.
        use = hours if hours["df"] > 0 else plain
        sd = math.sqrt(use["ss"] / use["df"]) if use["df"] > 0 else None
        if sd and use["df"] > 0:
            # Standardized residuals; within-config residuals shrink by (n-1)/n on average.
            for g, r in zip(groups, use["residuals"], strict=True):
                corr = math.sqrt(len(g) / (len(g) - 1))
                z_all += [x * corr / sd for x in r]
        for g in groups:
            g = sorted(g, key=lambda x: x.index)
            later = [x.log_tph - hours["slope"] * x.hours for x in g[1:]]
            first_gaps.append(g[0].log_tph - hours["slope"] * g[0].hours - sum(later) / len(later))
        task = _task_sd(groups)
        walls = [x.wall_s for x in s.starts if x.wall_s]
        out_sessions.append(
            {
                "session": s.name,
                "machine": s.machine,
                "max_load_per_core": s.max_load_per_core,
                "repeated_configs": len(groups),
                "starts": sum(len(g) for g in groups),
                "hours_spanned": round(max(x.hours for x in s.starts), 2),
                "sd_without_drift": round(math.sqrt(plain["ss"] / plain["df"]), 4),
                "sd_without_drift_df": plain["df"],
                "drift_per_hour": _round_fit(hours),
                "drift_per_run": _round_fit(index),
                "between_start_sd": round(sd, 4) if sd else None,
                "between_start_sd_df": use["df"],
                "between_start_sd_interval": _sd_interval(use["ss"], use["df"])
                if use["df"] > 0
                else None,
                "_ss": use["ss"],
                "task_sd": round(task[0], 4) if task else None,
                "task_sd_df": task[1] if task else 0,
                "mean_run_seconds": round(sum(walls) / len(walls), 1) if walls else None,
            }
        )
    # The quietest machine: the machine factor with the smallest pooled between-start sd.
    per_machine: dict[str, list[dict[str, Any]]] = {}
    for x in out_sessions:
        per_machine.setdefault(x["machine"], []).append(x)

    pooled = {k: _pooled(v) for k, v in per_machine.items()}  # machine: (ss, df)
    quiet = per_machine[min(pooled, key=lambda k: math.sqrt(pooled[k][0] / pooled[k][1]))]
    ref_ss, ref_df = _pooled(quiet)
    ref = math.sqrt(ref_ss / ref_df)
    for x in out_sessions:
        x["level"] = round(x["between_start_sd"] / ref, 2) if x["between_start_sd"] else None
    all_ss, all_df = _pooled(out_sessions)
    task_ss = sum(x["task_sd"] ** 2 * x["task_sd_df"] for x in out_sessions if x["task_sd"])
    task_df = sum(x["task_sd_df"] for x in out_sessions)
    quiet_task_ss = sum(x["task_sd"] ** 2 * x["task_sd_df"] for x in quiet if x["task_sd"])
    quiet_task_df = sum(x["task_sd_df"] for x in quiet)
    # Drift relative to each session's own sd: per hour in sds (so it scales with the noise).
    drifting = [
        x for x in out_sessions if x["between_start_sd"] and "interval" in x["drift_per_hour"]
    ]
    rel = [x["drift_per_hour"]["slope"] / x["between_start_sd"] for x in drifting]
    # A session's slope is measured better the longer it ran: weigh by hours spanned.
    weights = [x["hours_spanned"] for x in drifting]
    gaps = np.array(first_gaps)
    gap_t = stats.t.ppf(1 - (1 - CONFIDENCE) / 2, len(gaps) - 1)
    gap_se = float(gaps.std(ddof=1) / math.sqrt(len(gaps)))
    walls = [x["mean_run_seconds"] for x in out_sessions if x["mean_run_seconds"]]
    for x in out_sessions:
        del x["_ss"]
    return {
        "about": (
            "Written by `python -m benchmarks.noise_model` from every grid-*.json and "
            "repeatability-*.json record in benchmarks/data; do not edit by hand. Log tasks/h "
            "of fresh starts: y = config mean + drift x hours + between-start scale x Student "
            "t(nu); task log seconds jitter within a run by task_sd. Intervals are 95%."
        ),
        "files": sorted(
            {p.name for p in DATA.glob("grid-*.json")}
            | {p.name for p in DATA.glob("repeatability-*.json")}
        ),
        "reference": {
            "what": (
                "x1 of benchmarks/decision_sim.py: the quietest machine, the one whose "
                "sessions' pooled between-start sd (after drift) is the smallest"
            ),
            "sessions": [x["session"] for x in quiet],
            "between_start_sd": round(ref, 4),
            "df": ref_df,
            "interval": _sd_interval(ref_ss, ref_df),
            "task_sd": round(math.sqrt(quiet_task_ss / quiet_task_df), 4)
            if quiet_task_df
            else None,
            "task_sd_df": quiet_task_df,
        },
        "pooled": {
            "between_start_sd": round(math.sqrt(all_ss / all_df), 4),
            "df": all_df,
            "interval": _sd_interval(all_ss, all_df),
            "task_sd": round(math.sqrt(task_ss / task_df), 4),
            "task_sd_df": task_df,
            "drift_sds_per_hour": _rounded(rel, 3),
            "drift_sds_per_hour_rms": round(
                math.sqrt(sum(w * r * r for w, r in zip(weights, rel, strict=True)) / sum(weights)),
                3,
            ),
            "mean_run_seconds": round(sum(walls) / len(walls), 1),
        },
        "run_tails": _fit_t(np.array(z_all)),
        "first_start_effect": {
            "what": "log tasks/h of a config's first start less the mean of its later starts, "
            "after the session's drift",
            "mean": round(float(gaps.mean()), 4),
            "interval": _rounded((gaps.mean() - gap_t * gap_se, gaps.mean() + gap_t * gap_se)),
            "configs": len(gaps),
        },
        "machines": {
            k: {
                "between_start_sd": round(math.sqrt(ss / df), 4),
                "df": df,
                "interval": _sd_interval(ss, df),
            }
            for k, (ss, df) in pooled.items()
        },
        "sessions": out_sessions,
    }


def _pooled(sessions: list[dict[str, Any]]) -> tuple[float, int]:
    """The between-start sum of squares and degrees of freedom of `sessions` together."""
    return sum(x["_ss"] for x in sessions), sum(x["between_start_sd_df"] for x in sessions)


def _round_fit(f: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"slope": round(f["slope"], 4)}
    if "interval" in f:
        out["interval"] = _rounded(f["interval"])
    return out


def load_model(path: Path = OUT) -> dict[str, Any]:
    """The written model (`python -m benchmarks.noise_model` writes it)."""
    return dict(json.loads(path.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true", help="Print only.")
    args = parser.parse_args(argv)
    model = fit(load_sessions())
    text = json.dumps(model, indent=2) + "\n"
    if args.no_write:
        print(text)
        return 0
    OUT.write_text(text)
    ref, tails = model["reference"], model["run_tails"]
    print(
        f"x1: between-start sd {ref['between_start_sd']} {ref['interval']} over {ref['df']} df; "
        f"pooled {model['pooled']['between_start_sd']} over {model['pooled']['df']} df; "
        f"run tails nu {tails['nu']} {tails['nu_interval']}"
    )
    for s in model["sessions"]:
        print(
            f"  {s['session']}: sd {s['between_start_sd']} (x{s['level']}), drift/h "
            f"{s['drift_per_hour']}, task sd {s['task_sd']}, {s['machine']}"
        )
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
