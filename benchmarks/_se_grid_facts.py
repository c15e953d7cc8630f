"""What `sample_efficiency.py` says of the grid itself and of the truth fitted to it
(`grid_truth.py`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmarks._grid_replay import GridTable

ROOT = Path(__file__).resolve().parents[1]


def rel(path: Path) -> str:
    """`path` relative to the repository (as the README names files)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


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
        "rerecord": doc["rerecord"]["command"],
        "rerecorded": _rerecorded(doc),
        "rerecord_configs": len(doc["rerecord"]["configs"]),
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
        return text + ". Its top 10 are not re-recorded yet (`record_grid.py --rerecord`)."

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
