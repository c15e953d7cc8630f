"""The writing half of `sample_efficiency.py`: the table (Markdown and JSON) and the README's
section, both from what a run wrote. (The search-budget tables of the mode before
`--total-budget`, with their verdicts, were written by this module at 95daa70.)"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmarks._se_grid_facts import (
    rel,
    truth_text,
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
        f"equal TOTAL cost: the search (screening on) gets a share, then "
        "the shipped confirmation stage (floor start, pooled finalists, `confirm.run_looks`: "
        "looks, futility, drops) with the rounds the rest pays for; random search gets the "
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
    chosen = "; ".join(
        f"{label}: {c['split']:.0%} to search, confirm {c['k']}"
        for label, c in doc["chosen"].items()
    )
    tried = doc["splits_tried"]
    shares = f"{min(tried):.0%}-{max(tried):.0%}" if len(tried) > 1 else f"{tried[0]:.0%}"
    ks = " or ".join(str(k) for k in doc["ks_tried"])
    words = (
        f"Split per total (tuner's lowest mean regret at the first noise on seeds {lo_s}-{hi_s}, "
        f"not the table's draws; search shares {shares} x confirm {ks}): {chosen} "
        f"({doc['split_file']}). {verdict(doc['rows'])}"
    )
    assert lo_s == SELECT_FROM
    out += ["", src, *_wrap(words), END]
    return "\n".join(out)
