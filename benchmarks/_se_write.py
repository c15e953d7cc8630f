"""The writing half of `sample_efficiency.py`: what it says of the grid and of the truth fitted
to it (`grid_truth.py`), the table (Markdown and JSON) and the README's section, all from what a
run wrote."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmarks._grid_replay import GridTable
from benchmarks.grid_truth import rel


def grid_facts(table: GridTable, data: Path, seeds: int, took: float) -> dict[str, Any]:
    """What the README says of the grid itself."""
    return {
        "data": rel(data),
        "configs": len(table.configs),
        "runs": len(table.data["runs"]),
        "cost_min": round(table.grid_cost_s() / 60, 1),
        "seeds": seeds,
        "took_s": round(took),
    }


def truth_facts(path: Path) -> dict[str, Any]:
    """What the README says of the truth: its best config, how sure that is, how many configs
    are within 5% of the best, the knob effects once drift is in, and the fit's noise."""
    doc = json.loads(path.read_text())
    top = doc["configs"][0]
    params = doc["model"]["parameters"]

    def ratio(name: str) -> dict[str, Any] | None:
        e = params.get(name)
        if e is None:
            return None
        lo, hi = e["interval"]
        return {"ratio": round(math.exp(e["estimate"]), 3), "interval": [
            round(math.exp(lo), 3), round(math.exp(hi), 3)]}  # fmt: skip

    drift = params.get(f"drift/h {doc['model']['sittings'][0]}")
    return {
        "file": rel(path),
        "runs": doc["n_runs"],
        "sittings": len(doc["model"]["sittings"]),
        "best": top["key"],
        "best_words": config_words(top["params"]),
        "best_tasks_per_hour": top["tasks_per_hour"],
        "best_interval": top["interval"],
        "p_best_top": doc["p_best_top"],
        "expected_near_best": doc["expected_near_best"],
        "kv": ratio("KV high"),
        "seqs": ratio("seqs high"),
        "drift_per_h": None if drift is None else drift["estimate"],
        "drift_interval": None if drift is None else drift["interval"],
        "sigma": doc["model"]["sigma"]["estimate"],
        "tau": doc["model"]["tau"]["estimate"],
        "tau_interval": doc["model"]["tau"]["interval"],
        "rerecorded": _rerecorded(doc),
        "rerecord_configs": len({k for f in doc.get("rerecord_ratios", []) for k in f["configs"]}),
    }


def _rerecorded(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each re-record sitting the truth was fitted to (`rerecord_ratios`, in the sittings'
    order): its machine, config runs, and its n-gram shift against the reference sitting
    (ratio and 95% interval)."""
    sitting_of = {r["source"]: r["sitting"] for r in doc["runs"]}
    out = []
    for f in doc.get("rerecord_ratios", []):
        name = sitting_of.get(f["file"])
        if name is None or name == doc["model"]["sittings"][0]:
            continue
        e = doc["model"]["parameters"][f"n-gram x sitting {name}"]
        out.append(
            {
                "file": f["file"],
                "machine": f["machine"],
                "config_runs": sum(len(c["runs"]) for c in f["configs"].values()),
                "ngram": [round(math.exp(x), 3) for x in (e["estimate"], *e["interval"])],
            }
        )
    return out


def config_words(p: dict[str, Any]) -> str:
    """A config in a few words."""
    mem = f"KV {p['kv_cache_memory_bytes'] / 1e6:,.0f} MB, {p['max_num_seqs']} seqs"
    if p["method"] == "none":
        return f"no speculation, {mem}"
    return (
        f"n-gram depth {p['num_speculative_tokens']} lookup {p['prompt_lookup_min']}-"
        f"{p['prompt_lookup_max']}, {mem}"
    )


def truth_text(t: dict[str, Any] | None) -> str:
    """The README's paragraph on the truth and how certain it is (`truth_facts`)."""
    if not t:
        return ""
    lo, hi = t["best_interval"]
    text = (
        "The truth is a posterior, not the best recorded run (benchmarks/grid_truth.py: log "
        "tasks/h = knob effects + a per-config effect + each sitting's offset, n-gram shift and "
        f"drift, fitted to all {t['runs']} runs of {t['sittings']} sittings): its best, "
        f"{t['best_words']}, serves {t['best_tasks_per_hour']:.0f} tasks/h (95% {lo:.0f}-"
        f"{hi:.0f}) and is the best in {t['p_best_top']:.0%} of the draws; "
        f"{t['expected_near_best']} configs are expected within 5% of the best; run noise "
        f"{t['sigma']:.1%}, drift {t['drift_per_h']:+.1%} an hour at mid-sitting"
    )
    if kv := t.get("kv"):
        text += (
            f"; the 2 GB KV cache x{kv['ratio']:.3f} (95% x{kv['interval'][0]:.3f}-"
            f"x{kv['interval'][1]:.3f}) once drift is in"
        )
    again = t.get("rerecorded") or []
    if not again:
        return text + "."

    def name(s: dict[str, Any]) -> str:
        return s["machine"].replace("(R)", "").removesuffix(" 2 cores")

    runs = ", ".join(f"{s['config_runs']} on {name(s)}" for s in again)
    gains = " and ".join(
        f"x{s['ngram'][0]:.2f} ({s['ngram'][1]:.2f}-{s['ngram'][2]:.2f})" for s in again
    )
    return text + (
        f". Its top {t['rerecord_configs']} were re-recorded between baseline runs ({runs}), "
        f"with n-gram speed-ups of {gains} the grid's; the ranking among n-gram configs is shared."
    )


def _write(
    path: Path,
    lines: list[str],
    rows: list[dict[str, Any]],
    grid: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The table as Markdown (with the command and the date), and its cells as JSON."""
    command = "python -m benchmarks.sample_efficiency " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = [
        "# Sample efficiency (written by benchmarks/sample_efficiency.py)",
        "",
        f"`{command.strip()}`, {when}, {os.cpu_count()} cores. Replay of the recorded grid "
        f"({grid['data']}): load shape, answers not graded.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*head, *lines]) + "\n")
    doc = {
        "out": rel(path),
        "command": command.strip(),
        "written": when,
        "header": lines[0],
        "grid": grid,
        "rows": rows,
        **extra,
    }
    path.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# ---- the README's section ------------------------------------------------------------------

BEGIN = "<!-- sample-efficiency: written by benchmarks/sample_efficiency.py --readme -->"
END = "<!-- sample-efficiency: end -->"
_GLUE = re.compile(r"(\d) (s|min|tasks/h|configs|seeds|points|runs)\b")


def _wrap(text: str) -> list[str]:
    """Lines of at most 100 characters that never split a figure from its unit."""
    glued = _GLUE.sub(lambda m: f"{m.group(1)}\x00{m.group(2)}", text)
    return [x.replace("\x00", " ") for x in textwrap.wrap(glued, 100, break_on_hyphens=False)]


def write_readme(readme: Path, doc: dict[str, Any]) -> int:
    """Replace the README's section with `render_readme(doc)`; exit 2 if it has none."""
    text = readme.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        print(
            f"{readme}: no section to rewrite; put the lines {BEGIN} and {END} where it goes",
            file=sys.stderr,
        )
        return 2
    readme.write_text(text[:start] + render_readme(doc) + text[end + len(END) :])
    return 0


def render_readme(doc: dict[str, Any]) -> str:
    """The README's section from a `--total-budget` run: every row at an equal total cost."""
    from benchmarks._se_budget import SELECT_FROM, verdict
    from benchmarks._se_budget import table_lines as total_table

    grid = doc["grid"]
    files = [doc["out"], Path(doc["out"]).with_suffix(".json").as_posix()]
    src = f"<!-- source: {', '.join(files)} -->"
    lo, hi = grid["drift_range"]
    intro = (
        f"Replayed over the grid recorded on the CPU build (`{doc['command']}`, "
        f"{grid['took_s']} s, no vLLM; load shape): {grid['configs']} configs, "
        f"{grid['cost_min']} min in all. Every row at an "
        f"equal TOTAL cost: the search (screening on) gets a share as under `--budget`, then "
        "the shipped confirmation stage (floor start, pooled finalists, `run_looks`: "
        "looks, futility, drops), K and rounds by `--budget`'s power choice; random search "
        "gets the "
        f"same stage and split, paired by seed (seed s of {grid['seeds']} in posterior draw s "
        "of the truth). regret: 1 - mu(export) / max mu; run noise: the sd of log tasks/h "
        "between starts, plus a sitting's drift "
        f"({lo:.0%}-{hi:.0%} an hour)."
    )
    out = [BEGIN, src, *_wrap(intro)]
    if truth := truth_text(grid.get("truth")):
        t_src = f"<!-- source: {', '.join([*files, grid['truth']['file']])} -->"
        out += ["", t_src, *_wrap(truth)]
    out += ["", src, *total_table(doc["rows"])]
    lo_s, hi_s = doc["select_seeds"]
    chosen = "; ".join(f"{label}: {c['split']:.0%} to search" for label, c in doc["chosen"].items())
    tried = doc["splits_tried"]
    shares = f"{min(tried):.0%}-{max(tried):.0%}" if len(tried) > 1 else f"{tried[0]:.0%}"
    words = (
        f"Split per total (tuner's lowest mean regret at the first noise on seeds {lo_s}-{hi_s}, "
        f"not the table's draws; search shares of the runs {shares}): {chosen} "
        f"({doc['split_file']}). {verdict(doc['rows'])}"
    )
    assert lo_s == SELECT_FROM
    out += ["", src, *_wrap(words), END]
    return "\n".join(out)
