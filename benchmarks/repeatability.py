"""How repeatable is a trial's score? One config three times, interleaved with another.

Runs the baseline (A) and an n-gram config (B) of a preset as A B A B A B on the real vLLM
build, each run a fresh server start through the same `evaluate()` a study worker calls (no
plain-throughput benchmark). It prints, from that one run (its column of docs/repeatability.md,
the per-run lines and the pooled estimate):

- per config, tasks/h of each run and their coefficient of variation (CV = stdev / mean);
- the paired ratio B/A of each round and its CV (goal: at most 2% on the CPU preset), and the
  pooled paired estimate with its interval (`tuner.metrics.paired_ratio`);
- whether round 1 differs from the later rounds (per config, relative to their mean), and a
  trend across rounds (`tuner.metrics.drift.detect_trend`: a monotone run of at least 5%);
- the correctness probe: B's token match rate against A's first run, the floor (A's later
  starts against its first), and the guard's first-divergence verdict on each B run;
- the machine (CPU model and vector flags, cores, memory, vLLM version) and its load average
  before and after every run: figures hold for the machine that measured them.

It exits 1 when the paired ratio's CV is above 2% or a trend is found, saying which: a trend
is a finding, never averaged away. Each run appends its record to
benchmarks/data/repeatability-<model>-<gpu>.json (older records kept) and rewrites
docs/repeatability.md, every recorded machine's figures side by side.

With `--lock FILE` each server run takes that flock(2) lock, so a shared machine's other users
get their turn between runs.

    python -m benchmarks.repeatability [--model smollm2-135m --gpu cpu] [--rounds 3]
        [--ngram 3,2,3] [--tasks N] [--agents N] [--warmup-tasks N]
        [--lock /tmp/tuner-heavy.lock] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks._evaluate import fresh_rounds, interleaved
from benchmarks._machine import baseline_and_ngram, load_average, machine_record
from tuner.metrics import RunOutcomes, judge_outputs, match_rates, paired_ratio
from tuner.metrics.drift import detect_trend, first_round_gap
from tuner.settings import get_settings
from tuner.study import load_preset
from tuner.study.trial.request import TrialResult

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "repeatability.md"
CV_GOAL = 0.02


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--model", default="smollm2-135m")
    add("--gpu", default="cpu")
    add("--rounds", type=int, default=3)
    add("--ngram", default="3,2,3", help="depth,lookup_min,lookup_max of B")
    add("--tasks", type=int, help="override the preset's tasks")
    add("--agents", type=int, help="override the preset's agents")
    add("--warmup-tasks", type=int, help="override the preset's warm-up tasks (0: no warm-up)")
    add("--lock", help="flock this file around each server run")
    add("--json", help="append the record here (default: data/repeatability-MODEL-GPU.json)")
    add("--render", action="store_true", help="only rewrite docs/repeatability.md from the file")
    args = parser.parse_args()
    default = ROOT / "benchmarks" / "data" / f"repeatability-{args.model}-{args.gpu}.json"
    path = Path(args.json) if args.json else default
    if args.render:
        DOC.write_text(render(_records(path), path.name))
        return 0
    machine = machine_record()

    preset = load_preset(model=args.model, gpu=args.gpu)
    update: dict[str, int] = {
        k: v for k, v in (("tasks", args.tasks), ("agents", args.agents)) if v
    }
    if args.warmup_tasks is not None:
        update["warmup_tasks"] = args.warmup_tasks
    if update:
        preset = preset.model_copy(update={"workload": preset.workload.model_copy(update=update)})
    model_path, base_params, ngram_params = baseline_and_ngram(preset, args.ngram)
    configs = {"A": base_params, "B": ngram_params}
    runs: dict[str, list[TrialResult]] = {"A": [], "B": []}
    # The machine's 1-minute load average as each run starts and ends: noise is the machine's
    # as much as the server's, so the figures say how quiet the machine was.
    loads: list[tuple[float, float]] = []
    rounds = fresh_rounds(
        preset, configs, interleaved(list(configs), args.rounds), model_path=model_path,
        cache_dir=get_settings().cache_path(), study="repeatability", lock=args.lock,
    )  # fmt: skip
    for round_, name, run in rounds:
        result, (load_before, load_after) = run.result, run.load_1min
        loads.append(run.load_1min)
        if result.workload is None or result.failure_kind:
            print(f"round {round_} {name}: failed: {result.failure_reason}", file=sys.stderr)
            return 1
        runs[name].append(result)
        w = result.workload
        print(
            f"round {round_} {name}: {w.tasks_per_hour:,.1f} tasks/h "
            f"({w.successes}/{w.tasks} in {w.scored_wall_s:.1f} s), startup "
            f"{result.startup_s:.1f} s, warm-up {_warmup_s(result):.1f} s, load average "
            f"{load_before:.2f} at its start, {load_after:.2f} at its end",
            flush=True,
        )
    figures = _figures(runs, preset.workload.model_dump(mode="json"))
    figures["configs"] = configs
    figures["load_average_at_start"] = [before for before, _ in loads]
    figures["load_average_at_end"] = [after for _, after in loads]
    machine["load_average_after"] = load_average()
    figures["machine"] = machine
    figures["model"], figures["gpu"] = args.model, args.gpu
    print(render([figures], path.name).split("\n\n")[-1], end="")
    if pooled := figures["pooled"]:
        print(f"pooled paired estimate B/A: x{pooled['ratio']:.3f} [{pooled['low']:.3f}, "
              f"{pooled['high']:.3f}]")  # fmt: skip
    records = _records(path)
    records.append(figures)
    path.write_text(json.dumps(records, indent=2) + "\n")
    DOC.write_text(render(records, path.name))
    print(f"recorded in {path} and {DOC}")
    failures = _failures(figures)
    for line in failures:
        print(f"FAIL: {line}")
    return 1 if failures else 0


def _records(path: Path) -> list[dict[str, Any]]:
    """The file's records; a file holding one record (the first format) becomes a list of it."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [data]


def _warmup_s(result: TrialResult) -> float:
    """Seconds from the warm-up's start to the scored window's first task."""
    assert result.workload is not None
    scored = [t.started_s for t in result.workload.task_records if not t.warmup]
    return min(scored) if scored else 0.0


def _failures(f: dict[str, Any]) -> list[str]:
    """Why this run misses the repeatability goal, one line each; empty when it meets it."""
    out = []
    if f["cv_paired_ratio"] > CV_GOAL:
        out.append(f"paired-ratio CV {f['cv_paired_ratio']:.1%} is above the {CV_GOAL:.0%} goal")
    for name, trend in f.get("trends", {}).items():
        if trend["direction"] is not None:
            out.append(
                f"{name} trends across rounds ({trend['direction']}, {trend['change']:+.1%} "
                "over the rounds): rounds are not exchangeable on this machine"
            )
    return out


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
        "warmup_seconds": {k: [round(_warmup_s(r), 1) for r in v] for k, v in runs.items()},
        "first_round_gap": {k: first_round_gap(v) for k, v in tph.items()},
        "trends": _trends({"tasks_per_hour": tph, "paired_ratios": ratios}),
    }
    probes_a = [r.probe for r in runs["A"] if r.probe is not None]
    probes_b = [r.probe for r in runs["B"] if r.probe is not None]
    if len(probes_a) == len(runs["A"]) > 1 and len(probes_b) == len(runs["B"]):
        first = probes_a[0].outputs
        restarts = [p.outputs for p in probes_a[1:]]
        floor = [sum(m) / len(m) for m in (match_rates(first, o) for o in restarts)]
        ngram = [sum(m) / len(m) for m in (match_rates(first, p.outputs) for p in probes_b)]
        checks = [judge_outputs(first, p.outputs, *restarts) for p in probes_b]
        out["probe"] = {
            "prompts": len(first),
            "in_flight": probes_a[0].in_flight,
            "ngram_match": ngram,
            "floor_match": floor,
            "verdict": checks[0].describe(),
            "verdicts": [c.describe() for c in checks],
            "flagged": [c.changes_outputs for c in checks],
            "checks": [c.to_json() for c in checks],
        }
    return out


def _fmt(values: list[float] | None, spec: str) -> str:
    return ", ".join(format(v, spec) for v in values) if values else "-"


def render(records: list[dict[str, Any]], source: str) -> str:
    """docs/repeatability.md: every recorded run's figures side by side, one column each."""
    cols = [
        f"run {i}: {r['machine']['recorded_at'][:16].replace('T', ' ')} UTC"
        if r.get("machine")
        else f"run {i}: recorded before machine records"
        for i, r in enumerate(records, 1)
    ]
    rows: list[tuple[str, list[str]]] = []

    def row(name: str, cell: Any) -> None:
        rows.append((name, [cell(r) for r in records]))

    def machine(key: str, fmt: Any = str) -> Any:
        return lambda r: fmt(r["machine"][key]) if r.get("machine") else "not recorded"

    def probe(cell: Any) -> Any:
        return lambda r: cell(r["probe"]) if r.get("probe") else "-"

    row("CPU", machine("cpu_model"))
    row("CPU family/model", machine("cpu_family_model"))
    row("cores", machine("cores"))
    row("vector flags", machine("simd_flags", lambda v: " ".join(v) or "-"))
    row("vLLM", machine("vllm"))
    row("load average before (1, 5, 15 min)", machine("load_average", _fmt_list))
    row("load average after", machine("load_average_after", _fmt_list))
    row("1-min load at each run's start", lambda r: _fmt(r.get("load_average_at_start"), ".2f"))
    row("workload", lambda r: ", ".join(f"{k} {v}" for k, v in r["workload"].items()))
    row("A (baseline) tasks/h per round", lambda r: _fmt(r["tasks_per_hour"]["A"], ",.0f"))
    row("B (n-gram) tasks/h per round", lambda r: _fmt(r["tasks_per_hour"]["B"], ",.0f"))
    row("paired ratio B/A per round", lambda r: _fmt(r["paired_ratios"], ".3f"))
    row("paired-ratio CV (goal <= 2%)", lambda r: f"{r['cv_paired_ratio']:.1%}")
    row(
        "tasks/h CV, A / B",
        lambda r: f"{r['cv_tasks_per_hour']['A']:.1%} / {r['cv_tasks_per_hour']['B']:.1%}",
    )
    row(
        "round 1 vs later rounds, A / B",
        lambda r: " / ".join(
            f"{g:+.1%}" if g is not None else "-"
            for g in (first_round_gap(r["tasks_per_hour"][k]) for k in ("A", "B"))
        ),
    )
    row(
        "trend across rounds (A, B, ratio)",
        lambda r: "; ".join(
            detect_trend(v).describe(n).removeprefix("trend: ")
            if detect_trend(v).found
            else f"{n}: none ({detect_trend(v).change:+.1%})"
            for n, v in (
                ("A", r["tasks_per_hour"]["A"]),
                ("B", r["tasks_per_hour"]["B"]),
                ("ratio", r["paired_ratios"]),
            )
        ),
    )
    row(
        "warm-up before each window (s), A / B",
        lambda r: (
            f"{_fmt(r['warmup_seconds']['A'], '.0f')} / {_fmt(r['warmup_seconds']['B'], '.0f')}"
            if r.get("warmup_seconds")
            else "not recorded (warm-up tasks only)"
        ),
    )
    row("probe: n-gram token match vs baseline", probe(lambda p: _fmt(p["ngram_match"], ".2f")))
    row("probe: baseline floor", probe(lambda p: _fmt(p["floor_match"], ".2f")))
    row(
        "probe: guard verdict on n-gram",
        probe(lambda p: _verdicts(p.get("verdicts") or [p["verdict"]])),
    )
    row(
        "meets the goal (CV <= 2%, no trend)",
        lambda r: "yes" if not _failures({**r, "trends": _trends(r)}) else "no",
    )
    out = [
        "# Repeatability across machines",
        "",
        f"Written by `benchmarks/repeatability.py` from `benchmarks/data/{source}`; do not edit",
        "by hand. Each column is one run of the script (A = baseline, B = n-gram, interleaved A B",
        "A B A B, every run a fresh server start through `evaluate()`). Figures hold for the",
        "machine that measured them: its CPU, its vector flags and its load are in the column.",
        "Runs recorded before the script recorded machines say 'not recorded'.",
        "",
        "| | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name, cells in rows:
        out.append(f"| {name} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(out) + "\n"


def _verdicts(verdicts: list[str]) -> str:
    """The guard's verdict per n-gram round, identical ones said once."""
    if len(set(verdicts)) == 1:
        return f"{verdicts[0]} (all {len(verdicts)} rounds)" if len(verdicts) > 1 else verdicts[0]
    return "; ".join(f"round {i}: {v}" for i, v in enumerate(verdicts, 1))


def _fmt_list(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _trends(r: dict[str, Any]) -> dict[str, Any]:
    """A record's trends (recomputed for records written before they were stored)."""
    return r.get("trends") or {
        "A tasks/h": detect_trend(r["tasks_per_hour"]["A"]).to_json(),
        "B tasks/h": detect_trend(r["tasks_per_hour"]["B"]).to_json(),
        "paired ratio": detect_trend(r["paired_ratios"]).to_json(),
    }


if __name__ == "__main__":
    sys.exit(main())
