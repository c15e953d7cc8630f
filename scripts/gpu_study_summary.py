"""Summarise a GPU study into one small JSON: what each trial stored and what its vLLM logged.

Written for the qwen3.8-27b-shape/h200 studies (docs/gpu-validation.md): the study's SQLite file
and server logs are too large to keep in the repository, so this keeps, per trial, the params,
the memory emulation, KV cache tokens, tasks/h with its interval, startup and energy that tuner
stored, and from each vLLM log the lines a reader checks (weights, torch.compile, engine init,
KV cache memory and tokens, concurrency, the last speculative-decoding metrics, an engine error).
Its `table` is the published card's table as this study measured it: per config every run's KV
tokens, tasks/h with interval, prompt tokens from the cache, reuse all / short / none steps
(tuner.workload.reuse.three_way) and preemptions.

    python scripts/gpu_study_summary.py --storage sqlite:///study.db --logs LOGDIR \
        --out benchmarks/data/qwen3.8-27b-shape-h200.json [--note "what the run was"]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import optuna

_ATTRS = (
    "role",
    "gpu_emulation",
    "kv_cache_tokens",
    "tasks_per_hour",
    "tasks_per_hour_low",
    "tasks_per_hour_high",
    "startup_s",
    "start_parts",
    "timing",
    "energy_per_task_j",
    "gpu_memory_mib",
    "failure_kind",
    "failure_reason",
    "infeasible",
    "max_num_seqs_clamped",
    "acceptance_rate",
    "serve_command",
    "reuse",
    "block_size",
    "mamba_cache_mode",
    "dummy_weights",
    "preemptions",
    "cache_hit_pct",
    "control_of",
    "control_kind",
    "confirm_of",
)
_LOG_FACTS = {
    "vllm_version": r"Initializing a V1 LLM engine \(v([\w.]+)\)",
    "weights_gib": r"Model loading took ([\d.]+) GiB",
    "torch_compile_s": r"torch\.compile took ([\d.]+) s in total",
    "compile_cache_load_s": r"Directly load the compiled graph\(s\) for compile range \S+ from the "
    r"cache, took ([\d.]+) s",
    "profiling_run_s": r"Initial profiling/warmup run took ([\d.]+) s",
    "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
    "available_kv_gib": r"Available KV cache memory: (-?[\d.]+) GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "attention_block_tokens": r"Setting attention block size to (\d+) tokens",
    "mamba_cache_mode": r"Mamba cache mode is set to '(\w+)'",
    "cuda_graphs_gib": r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB",
    "cuda_graph_sizes": r"Profiling CUDA graph memory: ([^\n]*)",
    "ready_at": r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[api_server\.py:\d+\] Starting vLLM server",
}


def _number(text: str) -> float | int | str:
    cleaned = text.replace(",", "")
    try:
        return float(cleaned) if "." in cleaned else int(cleaned)
    except ValueError:
        return text


def log_facts(text: str) -> dict[str, Any]:
    """The facts of one vLLM log (all values of a fact that repeats, e.g. two compiles)."""
    out: dict[str, Any] = {}
    for name, pattern in _LOG_FACTS.items():
        found = [_number(v) for v in re.findall(pattern, text)]
        if found:
            out[name] = found[0] if len(found) == 1 else found
    warnings = re.findall(
        r"WARNING [^\]]*\] ([^\n]*(?:speculative|[Aa]sync scheduling)[^\n]*)", text
    )
    if warnings:
        out["speculation_warnings"] = sorted({w.strip()[:300] for w in warnings})
    spec = re.findall(r"SpecDecoding metrics: ([^\n]*)", text)
    if spec:
        out["spec_decoding_lines"] = len(spec)
        out["last_spec_decoding"] = spec[-1].strip().rstrip(",")
    busy = re.findall(
        r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) [^\n]*Avg generation throughput: [\d.]+ tokens/s, "
        r"Running: ([1-9]\d*) reqs",
        text,
    )
    if busy:
        out["requests_running_from"], out["requests_running_until"] = busy[0][0], busy[-1][0]
        out["max_requests_running"] = max(int(n) for _, n in busy)
    gen = re.findall(r"Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs", text)
    if gen:
        rates = [float(r) for r, running in gen if int(running) > 0]
        if rates:
            out["generation_tokens_per_s_while_running"] = [min(rates), max(rates)]
    answered = len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', text))
    out["chat_requests_answered"] = answered
    # An error after the stop signal is the shutdown's (a request cut off), not the engine's.
    running = text.split("trigger received signal=SIGTERM", 1)[0]
    dead = re.search(r"(EngineDeadError|illegal memory access|AcceleratorError)[^\n]*", running)
    out["engine_error_before_stop"] = dead.group(0).strip()[:300] if dead else None
    out["stopped_by_sigterm"] = len(running) < len(text)
    return out


def _scored_steps(storage: str, study: str, number: int) -> dict[str, Any]:
    """Prompt tokens served from the cache over the scored steps, and the scored window."""
    from tuner.storage import Store

    store = Store(storage)
    try:
        runs = store.workload_runs(study, number, with_tasks=True)
    finally:
        store.close()
    if not runs:
        return {}
    w = runs[-1].record
    steps = [s for task in w.task_records if not task.warmup for s in task.steps]
    prompt = sum(s.prompt_tokens for s in steps)
    cached = sum(s.cached_tokens or 0 for s in steps)
    return {
        "scored_tasks": w.tasks,
        "scored_wall_s": round(w.scored_wall_s, 1),
        "scored_steps": len(steps),
        "max_prompt_tokens": max((s.prompt_tokens for s in steps), default=None),
        "prompt_tokens_from_cache_pct": round(100 * cached / prompt, 1) if prompt else None,
    }


def table(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per config (no speculation, n-gram, MTP, the KV-cut control): every start of
    it, so a config measured twice shows both runs (the between-run spread is the noise)."""
    from tuner.workload.reuse import three_way

    rows: dict[str, dict[str, Any]] = {}
    for t in trials:
        if t["state"] != "COMPLETE" or t.get("tasks_per_hour") is None:
            continue
        method = t["params"].get("method", "none")
        key = "kv_cut" if t.get("control_kind") == "kv_cut" else method
        row = rows.setdefault(key, {"config": key, "runs": []})
        all_, short, none = three_way(t.get("reuse") or {})
        row["runs"].append(
            {
                "trial": t["number"],
                "kv_cache_tokens": t.get("kv_cache_tokens"),
                "block_size": t.get("block_size"),
                "tasks_per_hour": round(t["tasks_per_hour"], 1),
                "interval": [round(t["tasks_per_hour_low"], 1), round(t["tasks_per_hour_high"], 1)],
                "prompt_tokens_from_cache_pct": t.get("prompt_tokens_from_cache_pct"),
                "reuse_all_short_none": [all_, short, none],
                "reuse_steps": all_ + short + none,
                "preemptions": t.get("preemptions"),
                "acceptance_rate": t.get("acceptance_rate"),
                "startup_s": t.get("startup_s"),
                "start_parts": t.get("start_parts"),
            }
        )
    return list(rows.values())


# The published card (docs/workload.md: Qwen3.8-27B AWQ, one RTX 4090, vLLM 0.32.0, prefix
# caching on), the table this study is set beside.
PUBLISHED = {
    "where": "docs/workload.md: real Qwen3.8-27B, one RTX 4090, vLLM 0.32.0",
    "kv_cache_tokens": {"none": 36_253, "mtp": 19_727},
    "tasks_per_hour": {"none": 752, "kv_cut": 467, "mtp": 330},
    "prompt_tokens_from_cache_pct": {"none": 78, "mtp": 16},
}


def comparison(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios to no speculation (its runs averaged), here and on the published card."""
    by = {r["config"]: r["runs"] for r in rows}
    if "none" not in by:
        return {}

    def mean(config: str, field: str) -> float | None:
        values = [run[field] for run in by.get(config, []) if run.get(field) is not None]
        return sum(values) / len(values) if values else None

    base_tph, base_kv = mean("none", "tasks_per_hour"), mean("none", "kv_cache_tokens")
    out: dict[str, Any] = {"none_tasks_per_hour_mean": base_tph, "none_runs": len(by["none"])}
    tph = [run["tasks_per_hour"] for run in by["none"]]
    if len(tph) > 1:
        out["none_spread_pct"] = round(100 * (max(tph) - min(tph)) / (base_tph or 1), 1)
    for config in ("ngram", "mtp", "kv_cut"):
        value, kv = mean(config, "tasks_per_hour"), mean(config, "kv_cache_tokens")
        if value is not None and base_tph:
            out[f"{config}_over_none"] = round(value / base_tph, 2)
        if kv is not None and base_kv:
            out[f"{config}_kv_over_none"] = round(kv / base_kv, 2)
    pub = PUBLISHED["tasks_per_hour"]
    out["published_mtp_over_none"] = round(pub["mtp"] / pub["none"], 2)
    out["published_kv_cut_over_none"] = round(pub["kv_cut"] / pub["none"], 2)
    kv_pub = PUBLISHED["kv_cache_tokens"]
    out["published_mtp_kv_over_none"] = round(kv_pub["mtp"] / kv_pub["none"], 2)
    return out


def _log_order(name: str) -> tuple[str, str, int]:
    """vllm-YYYYMMDD-HHMMSS-PID-N-...: by launch stamp, then N."""
    parts = name.split("-")
    return parts[1], parts[2], int(parts[4])


def repeat_noise(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The between-start sd of log tasks/h, pooled over every config started more than once.

    Each config's runs are centred on their own mean, so the sd is of one start against the
    config's level: sqrt(sum of squared deviations / df), df = sum of (runs - 1). None when
    no config has two runs.
    """
    squares, df, configs = 0.0, 0, {}
    for row in rows:
        logs = [math.log(r["tasks_per_hour"]) for r in row["runs"] if r.get("tasks_per_hour")]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        configs[row["config"]] = len(logs)
    if not df:
        return None
    sd = math.sqrt(squares / df)
    return {
        "log_sd_per_start": round(sd, 4),
        "log_sd_paired_ratio": round(sd * math.sqrt(2), 4),
        "df": df,
        "runs_per_config": configs,
    }


def repeat_starts(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Fresh starts of the study's configs recorded by benchmarks/repeatability.py, by the
    table's config key (its method), each with the record it came from and its machine."""
    out: dict[str, list[dict[str, Any]]] = {}
    for i, record in enumerate(json.loads(path.read_text())):
        machine = record.get("machine") or {}
        for label, params in record["configs"].items():
            for value in record["tasks_per_hour"][label]:
                out.setdefault(params.get("method", "none"), []).append(
                    {
                        "source": f"{path.name}[{i}] {label}",
                        "params": params,
                        "tasks_per_hour": round(value, 1),
                        "recorded_at": machine.get("recorded_at"),
                        "cpu": machine.get("cpu_model"),
                    }
                )
    return out


def summarise(storage: str, logs: Path) -> dict[str, Any]:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    studies = optuna.get_all_study_names(storage)
    if len(studies) != 1:
        raise SystemExit(f"{storage} holds {len(studies)} studies; this script reads one")
    study = optuna.load_study(study_name=studies[0], storage=storage)
    # tuner names server logs vllm-STAMP-PID-N-pPORT-aATTEMPT.log, N counting starts in order.
    # Sorted by launch stamp, then N: logs of two machines' runs of one study interleave right.
    log_files = sorted(logs.glob("**/vllm-*.log"), key=lambda p: _log_order(p.name))
    trials = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"number": t.number, "state": t.state.name, "params": t.params}
        row.update({k: t.user_attrs[k] for k in _ATTRS if k in t.user_attrs})
        row.update(_scored_steps(storage, studies[0], t.number))
        trials.append(row)
    # The name's stamp (vllm-YYYYMMDD-HHMMSS-...) is when tuner launched the server.
    starts = [
        {
            "log": p.name,
            "launched_at": p.name.split("-")[2],
            **log_facts(p.read_text("utf-8", "replace")),
        }
        for p in log_files
    ]
    return {
        "study": studies[0],
        "study_attrs": {
            k: study.user_attrs.get(k) for k in ("model", "gpu", "mode", "vllm_version")
        },
        "table": (rows := table(trials)),
        "comparison": comparison(rows),
        "between_start_noise": repeat_noise(rows),
        "published": PUBLISHED,
        "trials": trials,
        "server_starts": starts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True, help="sqlite:///path of the study")
    parser.add_argument("--logs", type=Path, required=True, help="directory of vLLM logs")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--note", default=None, help="one line: where and how it ran")
    parser.add_argument(
        "--explain", type=Path, default=None, help="`tuner explain --json` output to include"
    )
    parser.add_argument(
        "--warm-start",
        type=Path,
        default=None,
        help="benchmarks/compile_cache_ab.py --warm-cache output: the baseline started again "
        "against the compile cache this study filled",
    )
    parser.add_argument(
        "--repeatability",
        type=Path,
        action="append",
        default=[],
        help="benchmarks/repeatability.py records of this study's configs: their starts join "
        "the between-start noise (repeatable)",
    )
    parser.add_argument(
        "--previous",
        type=Path,
        default=None,
        help="an earlier summary of this study: its server starts (logs no longer on hand) "
        "are kept before the ones under --logs",
    )
    args = parser.parse_args(argv)
    if not args.logs.is_dir():
        print(f"--logs {args.logs} is not a directory", file=sys.stderr)
        return 2
    files = [
        ("--explain", args.explain),
        ("--previous", args.previous),
        ("--warm-start", args.warm_start),
    ]
    for flag, path in [*files, *(("--repeatability", p) for p in args.repeatability)]:
        if path is not None and not path.is_file():
            print(f"{flag} {path} is not a file", file=sys.stderr)
            return 2
    summary = summarise(args.storage, args.logs)
    if args.previous is not None:
        earlier = json.loads(args.previous.read_text()).get("server_starts", [])
        seen = {start["log"] for start in summary["server_starts"]}
        kept = [start for start in earlier if start["log"] not in seen]
        summary["server_starts"] = sorted(
            kept + summary["server_starts"], key=lambda start: _log_order(start["log"])
        )
    if args.explain is not None:
        summary["explain"] = json.loads(args.explain.read_text())
    if args.warm_start is not None:
        summary["warm_start"] = json.loads(args.warm_start.read_text())
    if args.repeatability:
        extra: dict[str, list[dict[str, Any]]] = {}
        for path in args.repeatability:
            for key, runs in repeat_starts(path).items():
                extra.setdefault(key, []).extend(runs)
        summary["repeat_starts"] = extra
        summary["between_start_noise_study_only"] = summary["between_start_noise"]
        summary["between_start_noise"] = repeat_noise(
            [
                {**row, "runs": row["runs"] + extra.get(row["config"], [])}
                for row in summary["table"]
            ]
        )
    if args.note:
        summary = {"note": args.note, **summary}
    args.out.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
