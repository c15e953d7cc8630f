"""A `suffix` trial through tuner's own trial path on one GPU (issue 47, the GPU kit).

Runs no speculation, n-gram (depth 4, lookup 1-3) and suffix decoding (cap 4) of the
smollm2-135m GPU preset (h200, or h100 on an H100: the card's name decides), one fresh server
each, through `benchmarks._evaluate.fresh_start`, which builds the request as a study's driver
does and calls `evaluate()`, the function a study's worker runs (server start, warm-up, scored
replay, acceptance from vLLM's /metrics). It writes what each run measured to OUT/suffix-gpu.json
and a table to OUT/suffix-gpu.txt.

The GPU preset serves dummy weights (`load_format: dummy`): a random model repeats one token,
which any drafter that copies text predicts, so the acceptance and tasks/h there say that the
method starts, drafts, is scored and stored, nothing about its speed or acceptance on real text.
With `--real-weights` (the model dir holds `model.safetensors`: `tuner models prepare
smollm2-135m`'s output whole) the runs load the real SmolLM2 weights instead, and acceptance is
the drafters' on the replay's real prompts (replay mode: the answers' lengths are forced, their
text is the model's own).

    python scripts/gpu_lease/suffix_gpu.py --model-dir DIR --out OUT_DIR [--real-weights]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIGS: dict[str, dict[str, Any]] = {
    "none": {"method": "none"},
    "ngram": {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
    },
    "suffix": {"method": "suffix", "num_speculative_tokens": 4},
}
MEMORY = {"gpu_memory_utilization": 0.3, "max_num_seqs": 64}


def card() -> str:
    """The GPU preset for this card: h100 on an H100, else h200 (as scripts/gpu_study.sh)."""
    try:
        name = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout  # fmt: skip
    except OSError:
        name = ""
    return "h100" if "H100" in name else "h200"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="smollm2-135m config and tokenizer")
    parser.add_argument("--out", required=True, help="folder for suffix-gpu.json and .txt")
    real = "load the model dir's own weights (model.safetensors) instead of the preset's dummy"
    parser.add_argument("--real-weights", action="store_true", help=real)
    args = parser.parse_args()
    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").is_file():
        print(f"suffix_gpu: {model_dir} has no config.json; give a prepared model", file=sys.stderr)
        return 2
    if args.real_weights and not (model_dir / "model.safetensors").is_file():
        missing = f"suffix_gpu: --real-weights but {model_dir} has no model.safetensors"
        print(missing, file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from benchmarks._evaluate import fresh_start
    from tuner.server.knobs import suffix_decoding_available
    from tuner.study.space import load_preset

    gpu = card()
    preset = load_preset(model="smollm2-135m", gpu="h200")
    if args.real_weights:
        model = preset.model.model_copy(update={"load_format": None})
        preset = preset.model_copy(update={"model": model})
    cache = Path(tempfile.gettempdir()) / "tuner-suffix-gpu"
    rows: list[dict[str, Any]] = []
    print(f"preset smollm2-135m/h200 on {gpu}; suffix available: {suffix_decoding_available()}")
    for number, (name, params) in enumerate(CONFIGS.items()):
        run = fresh_start(
            preset, {**params, **MEMORY}, model_path=str(model_dir), cache_dir=cache,
            study="suffix-gpu", number=number, lock=None,
        )  # fmt: skip
        r, w = run.result, run.result.workload
        row = {
            "config": name,
            "params": {**params, **MEMORY},
            "failure": r.failure_reason,
            "startup_s": r.startup_s,
            "tasks_per_hour": None if w is None else w.tasks_per_hour,
            "tasks": None if w is None else [w.successes, w.tasks],
            "acceptance_rate": None if w is None else w.acceptance_rate,
            "mean_acceptance_length": None if w is None else w.mean_acceptance_length,
            "recorded_at": run.recorded_at,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    record = {
        "command": "python scripts/gpu_lease/suffix_gpu.py " + " ".join(sys.argv[1:]),
        "card": gpu,
        "weights": (
            "real (the model dir's model.safetensors; replay mode: load shape, not graded)"
            if args.real_weights
            else "dummy (load_format dummy): acceptance and tasks/h mean nothing here"
        ),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": rows,
    }
    (out / "suffix-gpu.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = ["| config | start s | tasks/h | acceptance | failure |", "|---|---|---|---|---|"]
    for row in rows:
        acc = row["acceptance_rate"]
        tph = row["tasks_per_hour"]
        shown_tph = "-" if tph is None else f"{tph:,.0f}"
        shown_acc = "-" if acc is None else f"{acc:.3f}"
        lines.append(
            f"| {row['config']} | {row['startup_s'] or 0:.0f} | {shown_tph} | {shown_acc} "
            f"| {row['failure'] or '-'} |"
        )
    (out / "suffix-gpu.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = [row["config"] for row in rows if row["failure"]]
    print(
        f"{len(rows) - len(failed)} of {len(rows)} runs scored"
        + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
