"""How long would CI take on another CPU? A timing model from a run's own vLLM logs.

CI's minutes are mostly real vLLM CPU servers: their starts, the prompt tokens they prefill and
the tokens they generate. A box's speed at those three differs by CPU (a Zen 3 without AVX-512
starts a server 2-3x slower and prefills an order of magnitude slower than a Zen 4), so the
minutes of one box say little about another. This script has two parts:

    python benchmarks/ci_timing.py measure [--lock FILE]
        starts the CPU preset's baseline server as a study would (its environment included),
        times the start, two fresh 4,390-token prefills one at a time, one 128-token decode and
        four at once; appends the record (and the machine) to benchmarks/data/cpu-rates.json.

    python benchmarks/ci_timing.py model --since EPOCH --total-s S [--install-s S]
        [--logs DIR ...] [--target zen3-2026-12-02] [--write docs/ci-timing.json]
        reads every vLLM log written since EPOCH under the log dirs (tuner's and the tests' caches
        and pytest's temp dirs by default), sums what the servers did (starts; start, busy and
        idle seconds; prompt and generated tokens from vLLM's own 10-second stats lines) and
        splits the run's measured total into: starts, prefill, decode, and the rest (install,
        lint, the tests' own Python, servers waiting on clients). It checks the split against
        this box (the tokens at this box's measured rates against the servers' busy seconds),
        then projects the total onto the target box: starts at its start time, tokens at its
        rates, the rest scaled by the ratio of the two boxes' install times (a plain
        single-thread CPU job).

The target's figures are the ones measured on that box (docs/vllm-facts.md, docs/ci.md); this
box's rates are the newest record of cpu-rates.json for this CPU. Both sides are per
environment: the rates of the settings that CI's servers use.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "cpu-rates.json"

# Measured on the Zen 3 box of 2026-12-02 (AMD EPYC 25/1, AVX2, no AVX-512), SmolLM2 on vLLM
# 0.32's CPU build, bf16, warm compile cache, both cores for the worker
# (VLLM_CPU_NUM_OF_RESERVED_CPU=0): ready in 117-133 s; two 4,390-token prefills in 160-173 s;
# four 128-token decodes at once in 13.4-15.3 s; `scripts/install.sh` 3 min 44 s.
TARGETS: dict[str, dict[str, float]] = {
    "zen3-2026-12-02": {
        "start_s": 125.0,
        "prefill_tok_s": 2 * 4390 / 166.5,
        "decode_tok_s": 4 * 128 / 14.35,
        "install_s": 224.0,
    },
}

_STAMP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_STATS = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s"
)
_READY = "Application startup complete"
_FILE_STAMP = re.compile(r"vllm-(\d{8}-\d{6})-")
PREFILL_TOKENS = 4390
DECODE_TOKENS = 128


def _when(line: str, year: int) -> float | None:
    m = _STAMP.search(line)
    if m is None:
        return None
    mo, d, h, mi, s = (int(x) for x in m.groups())
    return datetime.datetime(year, mo, d, h, mi, s).timestamp()


def read_log(path: Path) -> dict[str, float] | None:
    """What one server did: start, busy, idle seconds; prompt and generated tokens.

    None when the log never reached readiness (a failed start counts in the rest).
    """
    year = datetime.datetime.fromtimestamp(path.stat().st_mtime).year
    # tuner names the log at the launch (tuner.server.launcher: vllm-YYYYmmdd-HHMMSS-...), so
    # the start counts the Python imports before vLLM's first stamped line (about 12 s).
    launched = _FILE_STAMP.match(path.name)
    first = (
        datetime.datetime.strptime(launched.group(1), "%Y%m%d-%H%M%S").timestamp()
        if launched
        else None
    )
    ready = last = None
    stats: list[tuple[float, float, float]] = []
    for line in path.read_text(errors="replace").splitlines():
        t = _when(line, year)
        if t is None:
            # uvicorn's "Application startup complete." carries no time stamp: it happened
            # at the last stamped line before it (vLLM logs right up to it).
            if ready is None and _READY in line:
                ready = last
            continue
        first = t if first is None else first
        last = t
        m = _STATS.search(line)
        if m:
            stats.append((t, float(m.group(1)), float(m.group(2))))
    if first is None or ready is None or last is None:
        return None
    prompt = generated = busy = 0.0
    previous = ready
    for t, p, g in stats:
        interval = max(t - previous, 0.0)
        previous = t
        prompt += p * interval
        generated += g * interval
        if p > 0 or g > 0:
            busy += interval
    return {
        "start_s": ready - first,
        "busy_s": busy,
        "idle_s": max(last - ready - busy, 0.0),
        "prompt_tokens": prompt,
        "generated_tokens": generated,
    }


def logs_since(dirs: Iterable[Path], since: float) -> list[Path]:
    """Every vllm-*.log under `dirs` last written at or after `since`."""
    found = set()
    for d in dirs:
        if d.is_dir():
            found.update(p for p in d.rglob("vllm-*.log") if p.stat().st_mtime >= since)
    return sorted(found)


def split(
    servers: list[dict[str, float]], total_s: float, rates: dict[str, float]
) -> dict[str, float]:
    """The run's seconds by part, with this box's rates: starts, prefill, decode, the rest."""
    starts = sum(s["start_s"] for s in servers)
    prompt = sum(s["prompt_tokens"] for s in servers)
    generated = sum(s["generated_tokens"] for s in servers)
    busy = sum(s["busy_s"] for s in servers)
    prefill_s = prompt / rates["prefill_tok_s"]
    decode_s = generated / rates["decode_tok_s"]
    return {
        "servers": len(servers),
        "starts_s": starts,
        "prompt_tokens": prompt,
        "generated_tokens": generated,
        "busy_s": busy,
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "rest_s": total_s - starts - prefill_s - decode_s,
        "total_s": total_s,
    }


def project(parts: dict[str, float], here: dict[str, float], target: dict[str, float]) -> float:
    """The same run's seconds on `target`: each part at the target's speed for it."""
    return (
        parts["servers"] * target["start_s"]
        + parts["prompt_tokens"] / target["prefill_tok_s"]
        + parts["generated_tokens"] / target["decode_tok_s"]
        + parts["rest_s"] * target["install_s"] / here["install_s"]
    )


def _this_cpu() -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _machine import machine_record

    return machine_record()


def _same_cpu(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("cpu_family_model", "cpu_model", "simd_flags")
    return all(a.get(k) == b.get(k) for k in keys)


def newest_rates(machine: dict[str, Any]) -> dict[str, Any] | None:
    """The newest cpu-rates.json record measured on this CPU (None: none yet)."""
    if not DATA.is_file():
        return None
    mine = [r for r in json.loads(DATA.read_text()) if _same_cpu(r["machine"], machine)]
    return mine[-1] if mine else None


def _prompt(tokenizer: Any, n: int, seed: int) -> str:
    """A prompt of about `n` tokens no other request shares (no prefix-cache hit)."""
    rng = random.Random(seed)
    words = ["ledger", "order", "refund", "invoice", "policy", "agent", "tool", "path", "item"]
    text = f"Request {seed}: " + " ".join(rng.choice(words) for _ in range(n))
    ids = tokenizer(text)["input_ids"][: n - 1]
    return str(tokenizer.decode(ids))


def measure(lock: str | None) -> int:
    import concurrent.futures

    import httpx
    from transformers import AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _evaluate import locked

    from tuner.models import prepare
    from tuner.server import Launcher
    from tuner.settings import get_settings
    from tuner.study.space import load_preset

    preset = load_preset(model="smollm2-135m", gpu="cpu")
    cache = get_settings().cache_path()
    model_path = str(prepare(preset.model.prepare or "smollm2-135m", cache))
    spec = preset.server_spec(preset.baseline_params(), model_path=model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    launcher = Launcher(log_dir=cache / "logs" / "ci-timing")
    name = spec.served_model_name or model_path

    def complete(client: httpx.Client, url: str, prompt: str, tokens: int) -> float:
        began = time.monotonic()
        r = client.post(
            f"{url}/v1/completions",
            json={
                "model": name,
                "prompt": prompt,
                "max_tokens": tokens,
                "min_tokens": tokens,
                "ignore_eos": True,
                "temperature": 0,
            },
            timeout=1800,
        )
        r.raise_for_status()
        return time.monotonic() - began

    with locked(lock):
        began = time.monotonic()
        handle = launcher.launch(spec, timeout_s=1800)
        start_s = time.monotonic() - began
        try:
            with httpx.Client() as client:
                url = handle.base_url
                complete(client, url, _prompt(tokenizer, 64, 0), 4)  # first-request warm-up
                prefills = [
                    complete(client, url, _prompt(tokenizer, PREFILL_TOKENS, s), 1) for s in (1, 2)
                ]
                one = complete(client, url, _prompt(tokenizer, 16, 3), DECODE_TOKENS)
                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    t0 = time.monotonic()
                    list(
                        pool.map(
                            lambda s: complete(client, url, _prompt(tokenizer, 16, s), 128),
                            range(10, 14),
                        )
                    )
                    four = time.monotonic() - t0
        finally:
            handle.stop()
    record = {
        "env": dict(spec.env),
        "start_s": round(start_s, 1),
        "prefill_s": [round(x, 2) for x in prefills],
        "prefill_tok_s": round(2 * PREFILL_TOKENS / sum(prefills), 1),
        "decode_one_s": round(one, 2),
        "decode_four_s": round(four, 2),
        "decode_tok_s": round(4 * DECODE_TOKENS / four, 1),
        "machine": _this_cpu(),
        "command": "python benchmarks/ci_timing.py measure",
    }
    old = json.loads(DATA.read_text()) if DATA.is_file() else []
    DATA.write_text(json.dumps([*old, record], indent=2) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "machine"}))
    print(f"recorded in {DATA}")
    return 0


def model(args: argparse.Namespace) -> int:
    machine = _this_cpu()
    rates = newest_rates(machine)
    if rates is None:
        print(
            "ci_timing: no rates for this CPU in benchmarks/data/cpu-rates.json; run "
            "`python benchmarks/ci_timing.py measure` first",
            file=sys.stderr,
        )
        return 2
    if args.target not in TARGETS:
        print(
            f"ci_timing: --target {args.target!r}: choose from {sorted(TARGETS)}", file=sys.stderr
        )
        return 2
    dirs = [Path(d) for d in args.logs] or [
        Path.home() / ".cache" / "tuner",
        Path.home() / ".cache" / "tuner-test",  # tests/conftest.py's cache
        Path(f"/tmp/pytest-of-{os.environ.get('USER', 'root')}"),
    ]
    servers = [s for p in logs_since(dirs, args.since) if (s := read_log(p)) is not None]
    if not servers:
        print(
            f"ci_timing: no vLLM log under {[str(d) for d in dirs]} since {args.since}",
            file=sys.stderr,
        )
        return 2
    here = {
        "start_s": statistics.median(s["start_s"] for s in servers),
        "prefill_tok_s": rates["prefill_tok_s"],
        "decode_tok_s": rates["decode_tok_s"],
        "install_s": args.install_s,
    }
    parts = split(servers, args.total_s, here)
    target = TARGETS[args.target]
    projected = project(parts, here, target)
    check = parts["prefill_s"] + parts["decode_s"]
    out = {
        "here": here,
        "parts": {k: round(v, 1) for k, v in parts.items()},
        "check": {
            "busy_s": round(parts["busy_s"], 1),
            "tokens_at_measured_rates_s": round(check, 1),
            "ratio": round(check / parts["busy_s"], 3) if parts["busy_s"] else None,
        },
        "target": args.target,
        "target_rates": target,
        "projected_s": round(projected, 1),
        "projected_min": round(projected / 60, 1),
        "machine": machine,
        "command": " ".join(["python", "benchmarks/ci_timing.py", *sys.argv[1:]]),
    }
    print(
        f"{parts['servers']} server starts (median {here['start_s']:.0f} s), "
        f"{parts['prompt_tokens']:,.0f} prompt and {parts['generated_tokens']:,.0f} generated "
        "tokens; "
        f"busy {parts['busy_s']:.0f} s, tokens at this box's rates {check:.0f} s; "
        f"run {args.total_s / 60:.1f} min here -> {projected / 60:.1f} min on {args.target}"
    )
    if args.write:
        Path(args.write).write_text(json.dumps(out, indent=2) + "\n")
        print(f"written to {args.write}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--lock", default=None)
    p = sub.add_parser("model")
    p.add_argument("--since", type=float, required=True, help="epoch seconds the run began")
    p.add_argument("--total-s", type=float, required=True, help="the run's measured seconds")
    p.add_argument("--install-s", type=float, required=True, help="scripts/install.sh here, s")
    p.add_argument("--logs", nargs="*", default=[])
    p.add_argument("--target", default="zen3-2026-12-02")
    p.add_argument("--write", default=None)
    args = parser.parse_args()
    return measure(args.lock) if args.what == "measure" else model(args)


if __name__ == "__main__":
    raise SystemExit(main())
