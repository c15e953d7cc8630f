"""Summarise a GPU study into one small JSON: what each trial stored and what its vLLM logged.

Written for the qwen3.8-27b-shape/h200 study (docs/gpu-validation.md): the study's SQLite file
and server logs are too large to keep in the repository, so this keeps, per trial, the params,
the memory emulation, KV cache tokens, tasks/h with its interval, startup and energy that tuner
stored, and from each vLLM log the lines a reader checks (weights, torch.compile, engine init,
KV cache memory and tokens, concurrency, the last speculative-decoding metrics, an engine error).

    python scripts/gpu_study_summary.py --storage sqlite:///study.db --logs LOGDIR \
        --out benchmarks/data/qwen3.8-27b-shape-h200.json [--note "what the run was"]
"""

from __future__ import annotations

import argparse
import json
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
    "timing",
    "energy_per_task_j",
    "gpu_memory_mib",
    "failure_kind",
    "failure_reason",
    "infeasible",
    "max_num_seqs_clamped",
    "acceptance_rate",
    "serve_command",
)
_LOG_FACTS = {
    "vllm_version": r"Initializing a V1 LLM engine \(v([\w.]+)\)",
    "weights_gib": r"Model loading took ([\d.]+) GiB",
    "torch_compile_s": r"torch\.compile took ([\d.]+) s in total",
    "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
    "available_kv_gib": r"Available KV cache memory: (-?[\d.]+) GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "attention_block_tokens": r"Setting attention block size to (\d+) tokens",
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


def summarise(storage: str, logs: Path) -> dict[str, Any]:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    studies = optuna.get_all_study_names(storage)
    if len(studies) != 1:
        raise SystemExit(f"{storage} holds {len(studies)} studies; this script reads one")
    study = optuna.load_study(study_name=studies[0], storage=storage)
    # tuner names server logs vllm-STAMP-PID-N-pPORT-aATTEMPT.log, N counting starts in order.
    log_files = sorted(logs.glob("**/vllm-*.log"), key=lambda p: int(p.name.split("-")[4]))
    trials = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"number": t.number, "state": t.state.name, "params": t.params}
        row.update({k: t.user_attrs[k] for k in _ATTRS if k in t.user_attrs})
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
        "trials": trials,
        "server_starts": starts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True, help="sqlite:///path of the study")
    parser.add_argument("--logs", type=Path, required=True, help="directory of vLLM logs")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--note", default=None, help="one line: where and how it ran")
    args = parser.parse_args(argv)
    if not args.logs.is_dir():
        print(f"--logs {args.logs} is not a directory", file=sys.stderr)
        return 2
    summary = summarise(args.storage, args.logs)
    if args.note:
        summary = {"note": args.note, **summary}
    args.out.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
