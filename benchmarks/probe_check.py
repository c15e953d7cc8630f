"""The correctness probe on the real build: does batching change answers; the n-gram verdict.

Starts three real servers of a preset in turn (baseline, n-gram, baseline again) and asks each
the probe set (`tuner.workload.correctness_probe`) one prompt at a time and 4 at a time, with the
top log-probabilities of every output token. It prints and records:

- the same server asked twice, and 1-at-a-time against 4-at-a-time: how many prompts' greedy
  answers differ (does batching change the answer?);
- two starts of the baseline against each other (the rounding the guard must tolerate);
- every first divergence between two baseline answers with its margin (the baseline's
  log-probability of its own token minus the other's token): margins of pure rounding;
- the n-gram config against the baseline: `judge_outputs`' verdict, per batching.

Each run appends a record (with the machine: CPU model and flags, cores, load, vLLM version) to
benchmarks/data/probe-check-<model>-<gpu>.json and rewrites docs/correctness-probe.md from all
records. With `--lock FILE` each server start takes that flock(2) lock.

    python benchmarks/probe_check.py [--model smollm2-135m --gpu cpu] [--ngram 3,2,3]
        [--lock /tmp/tuner-heavy.lock]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _evaluate import locked
from _machine import baseline_and_ngram, load_average, machine_record

from tuner.metrics.correctness import (
    DEFAULT_TIE_MARGIN,
    EARLY_TOKENS,
    MIN_CLEAR_PROMPTS,
    first_divergences,
    judge_outputs,
)
from tuner.server import Launcher
from tuner.study import load_preset
from tuner.workload.correctness_probe import PROBE_IN_FLIGHT, ProbeResult, run_probe_sync

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "correctness-probe.md"


def _differing(a: ProbeResult, b: ProbeResult) -> int:
    return sum(1 for x, y in zip(a.outputs, b.outputs, strict=True) if x != y)


def _divergences(a: ProbeResult, b: ProbeResult) -> list[dict[str, Any]]:
    return [d.to_json() for d in first_divergences(a.outputs, b.outputs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--gpu", default="cpu")
    parser.add_argument("--ngram", default="3,2,3", help="depth,lookup_min,lookup_max")
    parser.add_argument("--lock", default=None, help="flock this file around each server")
    parser.add_argument("--json", default=None, help="records file (default benchmarks/data/)")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite the doc from the recorded runs"
    )
    args = parser.parse_args()
    path = (
        Path(args.json)
        if args.json
        else ROOT / "benchmarks" / "data" / f"probe-check-{args.model}-{args.gpu}.json"
    )
    if args.render:
        DOC.write_text(render(json.loads(path.read_text())))
        return 0

    preset = load_preset(model=args.model, gpu=args.gpu)
    model_path, base, ngram = baseline_and_ngram(preset, args.ngram)
    machine = machine_record()
    launcher = Launcher()
    probes: dict[str, ProbeResult] = {}
    plan = [
        ("baseline1", base, ("single_a", "batched_a", "single_b", "batched_b")),
        ("ngram", ngram, ("single_a", "batched_a")),
        ("baseline2", base, ("single_a", "batched_a")),
    ]
    loads = []
    for server, params, runs in plan:
        spec = preset.server_spec(params, model_path=model_path)
        with locked(args.lock):
            loads.append(load_average()[0])
            with launcher.launch(spec, timeout_s=preset.startup_timeout_s) as handle:
                for run in runs:
                    in_flight = 1 if run.startswith("single") else 4
                    probe = run_probe_sync(
                        handle.base_url,
                        spec.served_model_name or spec.model,
                        preset.workload,
                        in_flight=in_flight,
                    )
                    probes[f"{server}.{run}"] = probe
                    has_top = probe.outputs.top is not None
                    print(
                        f"{server} {run}: {len(probe.outputs)} prompts, {in_flight} in flight, "
                        f"{probe.wall_s:.1f} s, log-probabilities {'yes' if has_top else 'no'}",
                        flush=True,
                    )
    machine["load_average_after"] = load_average()
    machine["load_1min_at_each_start"] = loads

    p = probes
    pairs = {
        "same server, 1 at a time, asked twice": ("baseline1.single_a", "baseline1.single_b"),
        "same server, 4 at a time, asked twice": ("baseline1.batched_a", "baseline1.batched_b"),
        "same server, 1 at a time vs 4 at a time": ("baseline1.single_a", "baseline1.batched_a"),
        "two baseline starts, 1 at a time": ("baseline1.single_a", "baseline2.single_a"),
        "two baseline starts, 4 at a time": ("baseline1.batched_a", "baseline2.batched_a"),
        "n-gram vs baseline, 1 at a time": ("baseline1.single_a", "ngram.single_a"),
        "n-gram vs baseline, 4 at a time": ("baseline1.batched_a", "ngram.batched_a"),
    }
    comparisons = {
        name: {
            "differing_prompts": _differing(p[a], p[b]),
            "prompts": len(p[a].outputs),
            "divergences": _divergences(p[a], p[b]),
        }
        for name, (a, b) in pairs.items()
    }
    verdicts = {}
    for label, kind in (("1 at a time", "single"), ("4 at a time", "batched")):
        check = judge_outputs(
            p[f"baseline1.{kind}_a"].outputs,
            p[f"ngram.{kind}_a"].outputs,
            p[f"baseline2.{kind}_a"].outputs,
        )
        verdicts[label] = check.to_json()
    rounding = sorted(
        d["margin"]
        for name, c in comparisons.items()
        if not name.startswith("n-gram")
        for d in c["divergences"]
        if d["margin"] is not None
    )
    record = {
        "machine": machine,
        "model": args.model,
        "gpu": args.gpu,
        "ngram": {
            "depth": ngram["num_speculative_tokens"],
            "lookup_min": ngram["prompt_lookup_min"],
            "lookup_max": ngram["prompt_lookup_max"],
        },
        "default_tie_margin": DEFAULT_TIE_MARGIN,
        "probe_in_flight_default": PROBE_IN_FLIGHT,
        "logprobs_returned": {k: v.outputs.top is not None for k, v in p.items()},
        "probe_wall_s": {k: round(v.wall_s, 2) for k, v in p.items()},
        "comparisons": comparisons,
        "rounding_margins": rounding,
        "ngram_verdict": verdicts,
    }
    records = json.loads(path.read_text()) if path.exists() else []
    records.append(record)
    path.write_text(json.dumps(records, indent=1) + "\n")
    DOC.write_text(render(records))
    for line in _lines(record):
        print(line)
    print(f"recorded in {path.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


def _lines(record: dict[str, Any]) -> list[str]:
    m = record["machine"]
    lines = [
        f"machine: {m['cpu_model']} ({m['cpu_family_model']}), {m['cores']} cores, "
        f"SIMD {' '.join(m['simd_flags']) or 'none listed'}, vLLM {m['vllm']}, 1-min load "
        f"{min(m['load_1min_at_each_start']):.2f}-{max(m['load_1min_at_each_start']):.2f} "
        "at the server starts",
    ]
    for name, c in record["comparisons"].items():
        margins = [d["margin"] for d in c["divergences"] if d["margin"] is not None]
        at = ", ".join(
            f"prompt {d['prompt']} at token {d['position']} (margin "
            f"{'>=' if d['margin_is_bound'] else ''}{d['margin']})"
            for d in c["divergences"]
        )
        lines.append(
            f"{name}: {c['differing_prompts']}/{c['prompts']} prompts differ"
            + (f"; first divergences: {at}" if at else "")
            + (f" [largest margin {max(margins):.3f}]" if margins else "")
        )
    for label, v in record["ngram_verdict"].items():
        lines.append(f"n-gram verdict, probe {label}: {v['verdict']}")
    return lines


def render(records: list[dict[str, Any]]) -> str:
    """docs/correctness-probe.md from every recorded run (newest last)."""
    out = [
        "# The correctness probe: first divergences, batching, and the n-gram verdict",
        "",
        "Written by `benchmarks/probe_check.py` from "
        "`benchmarks/data/probe-check-*.json`; do not edit by hand.",
        "",
        "Greedy speculative decoding is lossless in principle, but verifying several tokens at",
        "once changes matrix shapes and rounding, and on some CPUs that flips near-ties (two",
        "tokens whose log-probabilities almost tie swap places; the answer then goes its own way).",
        "The guard (`tuner.metrics.correctness.judge_outputs`) therefore judges each prompt's",
        "first divergent token by the baseline's own log-probabilities: the margin between the",
        "baseline's token and the candidate's token there. Under the near-tie threshold",
        f"(default {DEFAULT_TIE_MARGIN} nats, stored with every probe; raised to twice the largest",
        "margin seen where two baseline starts diverged, at most 2 nats) it is rounding. Clear",
        f"margins in at least {MIN_CLEAR_PROMPTS} prompts (and 1/8 of them), or divergence within",
        f"the first {EARLY_TOKENS} tokens in half the prompts or more, is breakage. Answers",
        "without log-probabilities (older studies) keep the token-match-vs-floor rule.",
        "",
        "Each run below starts a baseline server, an n-gram server and the baseline again, and",
        "asks each the 16 probe prompts (32 greedy tokens) 1 at a time and 4 at a time.",
        "'Rounding margins' are the margins at every first divergence between two answers of",
        "the baseline (same server asked again, other batching, other start): what the",
        "threshold must stay above.",
        "",
        "## One prompt at a time",
        "",
        f"The probe sends its prompts {PROBE_IN_FLIGHT} at a time (`PROBE_IN_FLIGHT`). Summed over",
        "the recorded runs, prompts whose answers differed:",
        "",
        "| | 1 at a time | 4 at a time |",
        "|---|---|---|",
    ]
    for label, single, batched in (
        (
            "same server asked twice",
            "same server, 1 at a time, asked twice",
            "same server, 4 at a time, asked twice",
        ),
        (
            "two starts of the baseline",
            "two baseline starts, 1 at a time",
            "two baseline starts, 4 at a time",
        ),
        (
            "n-gram vs baseline",
            "n-gram vs baseline, 1 at a time",
            "n-gram vs baseline, 4 at a time",
        ),
    ):
        cells = []
        for name in (single, batched):
            differ = sum(r["comparisons"][name]["differing_prompts"] for r in records)
            total = sum(r["comparisons"][name]["prompts"] for r in records)
            cells.append(f"{differ}/{total}")
        out.append(f"| {label} | {cells[0]} | {cells[1]} |")
    mixed = sum(
        r["comparisons"]["same server, 1 at a time vs 4 at a time"]["differing_prompts"]
        for r in records
    )
    out += [
        "",
        f"and the same server's answers 1 at a time against 4 at a time: {mixed} prompts differ.",
        "Which prompts share a batch changes the answers (near-ties flip), and with 4 in flight",
        "the sharing depends on timing, so the baseline's own floor moves from start to start;",
        "one at a time the baseline answers the same on every start, and what remains between",
        "a candidate and the baseline is the candidate's own arithmetic (e.g. verifying several",
        "tokens at once), which the margin rule then judges. The price is time: the probe's",
        "wall time per server (s), 1 vs 4 at a time, is in each run's record (`probe_wall_s`).",
    ]
    for i, r in enumerate(records, 1):
        m = r["machine"]
        out += [
            "",
            f"## Run {i}: {m['recorded_at']}, {m['cpu_model']} ({m['cores']} cores)",
            "",
            f"- machine: CPU family/model {m['cpu_family_model']}, SIMD flags "
            f"`{' '.join(m['simd_flags'])}`, {m['memory_gib']} GiB, vLLM {m['vllm']}; "
            f"1-min load average at the server starts {m['load_1min_at_each_start']}, "
            f"after {m['load_average_after']} (the box is shared)",
            f"- model {r['model']} on preset {r['gpu']}; n-gram depth {r['ngram']['depth']}, "
            f"lookup {r['ngram']['lookup_min']}-{r['ngram']['lookup_max']}",
            "- probe wall time per server and batching (s): "
            + ", ".join(f"{k} {v}" for k, v in r["probe_wall_s"].items()),
            "- log-probabilities returned by every server: "
            + ("yes" if all(r["logprobs_returned"].values()) else str(r["logprobs_returned"])),
            "",
            "| comparison | prompts that differ | first divergences (prompt@token: margin) |",
            "|---|---|---|",
        ]
        for name, c in r["comparisons"].items():
            at = ", ".join(
                f"{d['prompt']}@{d['position']}: "
                f"{'>=' if d['margin_is_bound'] else ''}{d['margin']}"
                for d in c["divergences"]
            )
            out.append(f"| {name} | {c['differing_prompts']}/{c['prompts']} | {at or '-'} |")
        margins = r["rounding_margins"]
        out += [
            "",
            "- rounding margins (baseline vs baseline): "
            + (", ".join(f"{x:.3f}" for x in margins) if margins else "none: no divergence"),
        ]
        for label, v in r["ngram_verdict"].items():
            out.append(f"- n-gram verdict, probe {label}: {v['verdict']}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
