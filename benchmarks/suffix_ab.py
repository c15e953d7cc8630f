"""No speculation, the best n-gram and suffix decoding on the agent workload, interleaved.

Issue 47: vLLM serves SuffixDecoding (method "suffix") when `arctic-inference` is in its Python
(`scripts/install.sh` builds it for the CPU build). Does it beat n-gram on agent traffic, where
tool outputs and earlier turns are quoted back? This runs three configs that differ only in
their speculative method, each start a fresh server through the same `evaluate()` a study
worker calls (plain-throughput benchmark off), with real SmolLM2-135M weights:

- A: no speculation;
- B: the best n-gram of the recorded grid's posterior (`grid-truth-smollm2-135m-cpu-large.json`:
  depth 4, lookup 1-3);
- C: suffix decoding at the same cap of 4 draft tokens a step (vLLM's other suffix defaults:
  tree depth 24, spec factor 1.0, min token probability 0.1), so the two differ only in how
  they propose; 4 is also the top of the CPU preset's `num_speculative_tokens` range, which
  suffix shares with n-gram.

All three use the grid's best memory settings (KV 2 GB, max_num_seqs 2; the workload has 2
agents). First each config runs once unscored (A B C; `--no-prime` skips it): in both records
before it the A/B's first run (suffix) read about a third of the same config's rate in the
last round (648 then 1,904, 752 then 2,420 tasks/h) while n-gram's two runs agreed within 3%,
a cost of the first start on a cold machine (its start took 102 s, the others 35-39 s), not
of the method.
Round r runs C B A when r is even and A B C when it is odd (suffix first, so a start
that fails shows at once): each config's mean position is the same, and a linear drift of the
machine cancels from every ratio. The unit is a run (a fresh server start): per config it
reports each run's acceptance rate and mean acceptance length (vLLM's: 1 + accepted tokens per
draft) and their mean with a t-interval over the runs, and the tasks/h ratio to A per round
with the paired estimate over the rounds (`tuner.metrics.paired_ratio`, the export rule's
test; its interval includes the between-run term). The record is appended to
benchmarks/data/suffix-ab-<model>-<gpu>.json.

    python -m benchmarks.suffix_ab [--rounds 2] [--lock /tmp/tuner-vllm.lock] [--traces FILE]
        [--no-prime]

Replay workload: load shape (forced turn lengths; the target still writes the tokens, so
acceptance is real where the weights are). By default it is the preset's generated suite;
`--traces FILE.jsonl` replays recorded conversations instead (the preset's workload with
`traces` set, the format `tuner.workload.load_traces` reads), e.g. the SWE-agent trajectories
of `benchmarks/data/traces/swe-agent-demos.jsonl` (its provenance and converter:
benchmarks/data/traces/README.md).
As with the generated suite, the first `warmup_tasks` conversations (1 on the CPU preset) warm
the server and are not scored when the file holds more; every other one is scored once (tasks
= their number). Each conversation must fit the model's context (8,192 tokens for SmolLM2).
The record's "workload" says which ran: the generated replay (seed, tasks) or the traces file
(its path and sha256), and the table's first header cell says it too. One real-vLLM job at a
time (`--lock`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.metrics import RunOutcomes
    from tuner.study.space import Preset
    from tuner.study.trial.request import TrialResult

DATA_DIR = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
_MEMORY: dict[str, Any] = {"kv_cache_memory_bytes": 2_000_000_000, "max_num_seqs": 2}
CONFIGS: dict[str, dict[str, Any]] = {
    "A": {"method": "none", **_MEMORY},
    "B": {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
        **_MEMORY,
    },
    "C": {"method": "suffix", "num_speculative_tokens": 4, **_MEMORY},
}
NAMES = {"A": "no speculation", "B": "n-gram (best)", "C": "suffix"}


def order(rounds: int) -> list[tuple[int, str]]:
    """(round, config) in run order: C B A in even rounds, A B C in odd ones."""
    from benchmarks._evaluate import interleaved

    return interleaved(("C", "B", "A"), rounds, alternate=True)


def mean_interval(values: list[float], confidence: float = 0.95) -> dict[str, float] | None:
    """Mean and t-interval over runs (None without values; no interval from one run)."""
    from scipy import stats

    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": 1}
    half = stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * statistics.stdev(values)
    half /= math.sqrt(len(values))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": len(values)}


def _outcomes(result: TrialResult) -> RunOutcomes:
    from tuner.metrics import RunOutcomes

    assert result.workload is not None
    w = result.workload
    return RunOutcomes.of(w.task_records, w.scored_wall_s, w.agents)


def _run_row(name: str, rnd: int, result: TrialResult, load: float) -> dict[str, Any]:
    w = result.workload
    assert w is not None
    return {
        "config": name,
        "round": rnd,
        "tasks_per_hour": round(w.tasks_per_hour, 2),
        "completed": w.successes,
        "tasks": w.tasks,
        "scored_wall_s": round(w.scored_wall_s, 3),
        "startup_s": round(result.startup_s, 1),
        "spec_drafts": w.spec_drafts,
        "spec_draft_tokens": w.spec_draft_tokens,
        "spec_accepted_tokens": w.spec_accepted_tokens,
        "acceptance_rate": w.acceptance_rate,
        "mean_acceptance_length": w.mean_acceptance_length,
        "prefix_cache_hit_ratio": w.prefix_cache_hit_ratio,
        "load_1min": load,
    }


def _fmt(est: dict[str, float] | None, digits: int = 3) -> str:
    if est is None:
        return "-"
    if math.isnan(est["low"]):
        return f"{est['mean']:.{digits}f}"
    return f"{est['mean']:.{digits}f} [{est['low']:.{digits}f}, {est['high']:.{digits}f}]"


def workload_label(workload: dict[str, Any] | None) -> str:
    """The workload a record ran, in words (records before `--traces` ran the generated one)."""
    if workload is None or workload.get("source") != "traces":
        return "generated replay"
    return f"traces {Path(workload['path']).name}, sha256 {workload['sha256'][:12]}"


def table(record: dict[str, Any]) -> str:
    """The Markdown table of a record: one row a config; the first header cell names the
    workload."""
    lines = [
        f"| config ({workload_label(record.get('workload'))}) | tasks/h per run | ratio to no "
        "speculation (paired, 95%) | acceptance rate (mean over runs, 95%) | mean acceptance "
        "length |",
        "|---|---|---|---|---|",
    ]
    for name, summary in record["summary"].items():
        ratio = "1" if name == "A" else "-"
        if name != "A" and (paired := summary["ratio_to_none"]):
            ratio = f"x{paired['ratio']:.3f} [{paired['low']:.3f}, {paired['high']:.3f}]"
        runs = ", ".join(f"{v:,.0f}" for v in summary["tasks_per_hour"])
        lines.append(
            f"| {NAMES[name]} | {runs} | {ratio} | {_fmt(summary['acceptance_rate'])} | "
            f"{_fmt(summary['mean_acceptance_length'], 2)} |"
        )
    return "\n".join(lines)


def read_traces(path: str) -> tuple[dict[str, Any], int] | str:
    """The record's description of a traces file and its number of conversations, or the
    one-line reason it cannot be replayed (tuner.workload's loader, no vLLM import)."""
    from tuner.errors import WorkloadError
    from tuner.workload.replay import load_traces

    try:
        scripts = load_traces(path)
        data = Path(path).read_bytes()
    except WorkloadError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot read traces file {path}: {exc.strerror}"
    resolved = Path(path).resolve()
    shown = resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved
    described = {
        "source": "traces",
        "path": str(shown),
        "sha256": hashlib.sha256(data).hexdigest(),
        "conversations": len(scripts),
    }
    return described, len(scripts)


def with_workload(preset: Preset, traces: str | None, conversations: int) -> Preset:
    """`preset` replaying `traces` (all its conversations: the first `warmup_tasks` warm up
    when there are more, the rest are scored), or `preset` itself without traces."""
    if traces is None:
        return preset
    w = preset.workload
    warm = w.warmup_tasks if conversations > w.warmup_tasks else 0
    data = json.loads(preset.model_dump_json())
    data["workload"] |= {"traces": str(Path(traces).resolve()), "tasks": conversations - warm}
    return type(preset).model_validate(data)  # validated: a workload the runner accepts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--model", default="smollm2-135m")
    add("--gpu", default="cpu")
    add("--rounds", type=int, default=2)
    add("--lock", help="flock this file around each server run")
    add(
        "--no-prime",
        dest="prime",
        action="store_false",
        help="skip the unscored start of each config before the rounds (a warm compile cache)",
    )
    add(
        "--traces",
        metavar="PATH",
        help="replay this JSONL traces file (tuner's --traces format) instead of the generated "
        "suite, e.g. benchmarks/data/traces/swe-agent-demos.jsonl",
    )
    args = parser.parse_args()
    if args.rounds < 2:
        print("suffix_ab: --rounds must be at least 2 (one run has no interval)", file=sys.stderr)
        return 2
    if (args.model, args.gpu) != ("smollm2-135m", "cpu"):
        print(
            "suffix_ab: only --model smollm2-135m --gpu cpu (real weights on the CPU build); "
            "acceptance on dummy weights means nothing",
            file=sys.stderr,
        )
        return 2
    traces: dict[str, Any] | None = None
    conversations = 0
    if args.traces is not None:
        read = read_traces(args.traces)
        if isinstance(read, str):
            print(f"suffix_ab: {read}", file=sys.stderr)
            return 2
        traces, conversations = read
    # Imported once the input is good: a bad argument is answered before vLLM is touched.
    from benchmarks._evaluate import fresh_rounds
    from benchmarks._machine import machine_record
    from benchmarks.record_grid import PLANS
    from tuner.metrics import paired_ratio
    from tuner.models import prepare
    from tuner.server.knobs import suffix_decoding_available
    from tuner.settings import get_settings
    from tuner.study.space import config_key

    if not suffix_decoding_available():
        print(
            "suffix_ab: arctic-inference is not in vLLM's Python; run scripts/install.sh",
            file=sys.stderr,
        )
        return 2
    preset = with_workload(PLANS["large"].preset(), args.traces, conversations)
    settings = preset.workload
    workload = {
        **(traces or {"source": "generated replay", "seed": settings.seed}),
        "tasks": settings.tasks,
        "warmup_tasks": settings.warmup_tasks,
        "agents": settings.agents,
    }
    print(
        f"workload: {workload_label(workload)}, {settings.tasks} scored tasks, "
        f"{settings.agents} agents",
        flush=True,
    )
    cache = get_settings().cache_path()
    model_path = str(prepare(preset.model.prepare or args.model, cache))
    results: dict[str, list[TrialResult]] = {n: [] for n in CONFIGS}
    rows: list[dict[str, Any]] = []
    primes: list[dict[str, Any]] = []
    if args.prime:
        # One unscored start of each config first: the A/B's first run read a third of the
        # same config's later rate in both records before this (see the docstring).
        warm = fresh_rounds(
            preset, CONFIGS, [(-1, n) for n in CONFIGS], model_path=model_path,
            cache_dir=cache, study="suffix-ab-prime", lock=args.lock,
        )  # fmt: skip
        for _, name, run in warm:
            w = run.result.workload
            primes.append({
                "config": name,
                "tasks_per_hour": None if w is None else round(w.tasks_per_hour, 2),
                "startup_s": round(run.result.startup_s, 1),
                "failure": run.result.failure_reason,
            })  # fmt: skip
            print(f"prime {name} ({NAMES[name]}, not scored): {primes[-1]}", flush=True)
    rounds = fresh_rounds(
        preset, CONFIGS, order(args.rounds), model_path=model_path, cache_dir=cache,
        study="suffix-ab", lock=args.lock,
    )  # fmt: skip
    for n, (rnd, name, run) in enumerate(rounds):
        result, load = run.result, run.load_1min[0]
        if result.workload is None or result.failure_kind:
            print(f"run {n} ({name}) failed: {result.failure_reason}", file=sys.stderr)
            return 1
        results[name].append(result)
        rows.append(_run_row(name, rnd, result, load))
        w = result.workload
        acc = w.acceptance_rate
        print(
            f"run {n + 1}/{3 * args.rounds} {name} ({NAMES[name]}): {w.tasks_per_hour:,.1f} "
            f"tasks/h ({w.successes}/{w.tasks} in {w.scored_wall_s:.1f} s), acceptance "
            f"{'-' if acc is None else f'{acc:.3f}'}, start {result.startup_s:.0f} s, load {load}",
            flush=True,
        )
    base = [_outcomes(r) for r in results["A"]]
    summary: dict[str, Any] = {}
    for name in CONFIGS:
        mine = [row for row in rows if row["config"] == name]
        est = None if name == "A" else paired_ratio([_outcomes(r) for r in results[name]], base)
        tph = [row["tasks_per_hour"] for row in mine]
        rates, lengths = (
            [row[key] for row in mine if row[key] is not None]
            for key in ("acceptance_rate", "mean_acceptance_length")
        )
        summary[name] = {
            "params": config_key(CONFIGS[name]),
            "tasks_per_hour": tph,
            "round_ratios_to_none": None
            if name == "A"
            else [
                round(x / y, 4) for x, y in zip(tph, summary["A"]["tasks_per_hour"], strict=True)
            ],
            "ratio_to_none": None
            if est is None
            else {"ratio": est.ratio, "low": est.low, "high": est.high, "p_value": est.p_value},
            "acceptance_rate": mean_interval(rates),
            "mean_acceptance_length": mean_interval(lengths),
        }
    machine = machine_record()
    record = {
        "configs": {n: CONFIGS[n] for n in CONFIGS},
        "names": NAMES,
        "order": [name for _, name in order(args.rounds)],
        "primes": primes,
        "runs": rows,
        "summary": summary,
        "machine": machine,
        "recorded_at": machine["recorded_at"],
        "command": " ".join(["python -m benchmarks.suffix_ab", *sys.argv[1:]]),
        "mode": "traces" if traces else preset.workload.mode,
        "workload": workload,
        "unit": "a run: one fresh server start; intervals are over runs (rounds)",
    }
    path = DATA_DIR / f"suffix-ab-{args.model}-{args.gpu}.json"
    previous = json.loads(path.read_text()) if path.is_file() else []
    path.write_text(json.dumps([*previous, record], indent=2) + "\n")
    print(table(record))
    print(f"recorded in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
