"""A config's start against a study's compile cache, on a real vLLM: what the cache saves.

tuner gives every vLLM install one compile cache under its own cache
(`tuner.server.compile_cache`), so a config that started before (a confirmation round, explain's
control, the next study) finds what its first start compiled. Here the preset's baseline starts
once against the compile cache a study filled (its tuner cache, `--warm-cache`), and the study's
baseline trial (`--cold-storage`) gives the first start it is compared with; prints both starts'
seconds and parts and the ratio; writes the record as JSON. That is how scripts/gpu_study.sh
measures a warm start on a GPU lease that has no time for a second cold one.

    python -m benchmarks.compile_cache_ab --model qwen3.8-27b-shape --gpu h200 \
        --warm-cache $TUNER_CACHE_DIR --cold-storage sqlite:///study.db --out warm.json

The A B A B comparison on the CPU build (an empty cache root, then its repeat, per round) was a
one-off: its record is benchmarks/data/compile-cache-ab-smollm2-135m-cpu.json and
docs/vllm-facts.md quotes it; `git show e40fbbb:benchmarks/compile_cache_ab.py` has the mode.
Run alone on the box (one real vLLM at a time)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks._machine import machine_record
from tuner.attrs import TrialAttr
from tuner.models import prepare
from tuner.server import Launcher
from tuner.server.facts import start_parts
from tuner.study.preflight.dtype import resolve_dtype
from tuner.study.space import load_preset


def _start(launcher: Launcher, spec: Any) -> dict[str, Any]:
    began = time.monotonic()
    handle = launcher.launch(spec, timeout_s=900)
    ready = time.monotonic() - began
    handle.stop()
    parts = start_parts(handle.facts)
    print(f"  ready in {ready:.1f} s: {parts}", flush=True)
    return {"ready_s": round(ready, 2), "parts": parts}


def _write(out: Path, spec: Any, what: str, **figures: Any) -> None:
    """The record: what it measured, the server command, the machine, the figures."""
    record = {"what": what, "command": spec.serve_command(), "machine": machine_record()}
    out.write_text(json.dumps({**record, **figures}, indent=2) + "\n")


def _study_first_start(url: str, params: dict[str, Any]) -> dict[str, Any]:
    """The start of the study's trial of `params` (the baseline's): its first on that cache."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    names = optuna.get_all_study_names(url)
    if len(names) != 1:
        raise SystemExit(f"{url}: expected one study, found {len(names)}")
    study = optuna.load_study(study_name=names[0], storage=url)
    for t in sorted(study.trials, key=lambda t: t.number):
        if t.params == params and t.user_attrs.get(TrialAttr.STARTUP_S):
            return {
                "trial": t.number,
                "ready_s": round(float(t.user_attrs[TrialAttr.STARTUP_S]), 2),
                "parts": t.user_attrs.get(TrialAttr.START_PARTS, {}),
            }
    raise SystemExit(f"{url}: no trial of the baseline {params} recorded a start")


def _warm_only(args: argparse.Namespace, preset: Any, out: Path) -> None:
    """One start against a study's compile cache, set beside the study's first start."""
    params = preset.baseline_params()
    model = prepare(args.model, args.warm_cache)  # the study's own copy: the same path
    spec = preset.server_spec(params, model_path=str(model))
    print(f"command {spec.serve_command()}", flush=True)
    first = _study_first_start(args.cold_storage, params)
    warm = _start(Launcher(cache_dir=args.warm_cache), spec)
    ratio = warm["ready_s"] / first["ready_s"]
    what = (
        f"ready seconds of the {args.model} {args.gpu} preset's baseline: the study's first start "
        "of it (trial's stored start) and one more start against the compile cache that study "
        "filled"
    )
    _write(out, spec, what, first=first, warm=warm, warm_over_first=round(ratio, 3))
    print(
        f"first (trial {first['trial']}) {first['ready_s']:.1f} s {first['parts']}\n"
        f"warm {warm['ready_s']:.1f} s {warm['parts']}: x{ratio:.3f}; wrote {out}"
    )


def main() -> None:
    """Start the baseline once against a study's compile cache and write it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--model", default="smollm2-135m")
    add("--gpu", default="cpu")
    add("--out", type=Path, help="default: data/compile-cache-ab-MODEL-GPU.json")
    warm = "a tuner cache a study filled: one start against its compile cache"
    add("--warm-cache", type=Path, required=True, help=warm)
    add("--cold-storage", required=True, help="the study's storage URL")
    args = parser.parse_args()
    out = args.out or Path(f"benchmarks/data/compile-cache-ab-{args.model}-{args.gpu}.json")
    preset, _ = resolve_dtype(load_preset(model=args.model, gpu=args.gpu))
    _warm_only(args, preset, out)


if __name__ == "__main__":
    main()
