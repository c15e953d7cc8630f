"""The writing half of `sample_efficiency.py`: the table (Markdown and JSON), the verdicts, and
the README's section, all from the rows `_se_metric.rows_from_seeds` computed."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from _se_grid_facts import GOAL_BUDGET, GOAL_HIT, GOAL_MARGIN, GOAL_REGRET, rel, truth_text
from _se_searches import DEFAULT, RANDOM_DEFAULT


def _hit(rows: list[dict[str, Any]], search: str, budget: float, slots: int = 1) -> float | None:
    for r in rows:
        if r["search"] == search and r["slots"] == slots:
            return float(r["hit"][f"{budget:.0%}"])
    return None


def verdict_lines(grid: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The goal, and whether each search met it, from the rows (1 slot)."""
    b = GOAL_BUDGET
    rnd = _hit(rows, "random", b)
    if rnd is None:
        return []
    out = [
        "",
        f"Goal at {b:.0%} of the grid's cost (1 slot): >= {GOAL_HIT:.0%} within 5%, and >= "
        f"{GOAL_MARGIN * 100:.0f} points over random search ({rnd:.0%}).",
    ]
    for name in ("tuner", "tuner + screening"):
        hit = _hit(rows, name, b)
        if hit is None:
            continue
        margin = (hit - rnd) * 100
        short = max(0.0, (GOAL_HIT - hit) * 100)
        met_hit = "met" if short == 0 else f"{short:.0f} points short"
        met_margin = (
            "met" if margin >= GOAL_MARGIN * 100 else f"{GOAL_MARGIN * 100 - margin:.0f} short"
        )
        out.append(f"- {name}: {hit:.0%} ({met_hit}), {margin:+.0f} over random ({met_margin}).")
    out += _why_lines(grid, rows)
    return out


def _why_lines(grid: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Why the hit rate is what it is, from the numbers: how often a perfect pick of the
    finished trials would have exported a near-best config (the ceiling of any export rule),
    how often the export did, the noise it picks under, and how often confirmation fell back
    to the baseline."""
    tuner = next((r for r in rows if r["search"] == "tuner" and r["slots"] == 1), None)
    if tuner is None or tuner.get("reach") is None:
        return []
    b = f"{GOAL_BUDGET:.0%}"
    if "found" in tuner:
        text = (
            f"- Why: by {b} tuner had finished a run of a near-best config in "
            f"{tuner['found'][b]:.0%} of the seeds (the ceiling of any pick) and exported one in "
            f"{tuner['hit'][b]:.0%}"
        )
    else:
        text = (
            f"- Why: in half the seeds tuner had finished a run of a near-best config by "
            f"{tuner['reach']:.0%} of the grid's cost, yet at {b} exported one in "
            f"{tuner['hit'][b]:.0%}"
        )
    fallback = tuner.get("baseline", {}).get(b)
    if fallback:
        text += f" (the baseline in {fallback:.0%})"
    text += ": it picks among single runs"
    cv = grid.get("repeat_cv")
    if grid.get("noise_sd") is not None:
        text += (
            f" whose tasks/h moves {grid['noise_sd']:.1%} between server starts, on a box that "
            f"drifts, against a 5% band of {grid['near_best']} configs"
        )
    elif cv is not None:
        text += (
            f" whose tasks/h moves {cv:.1%} (CV) between server starts (the repeats ran 1-2 h "
            f"after the first runs: drift included), against a 5% band of {grid['near_best']} "
            "configs"
        )
    out = [text + "."]
    confirm = next((r for r in rows if r["search"] == DEFAULT.name and r["slots"] == 1), None)
    if confirm is not None and "baseline" in confirm:
        out.append(
            f"- {DEFAULT.name} exported the baseline in {confirm['baseline'][b]:.0%} at {b}: a "
            "candidate must beat it beyond the between-run noise on fresh paired runs "
            "(docs/decision-sim.md: false wins at most 5%)."
        )
    return out


def regret_lines(doc: dict[str, Any]) -> list[str]:
    """Issue 36's goal at a quarter of the cost, and whether each search met it, from the rows
    and the paired differences against random search."""
    b = f"{GOAL_BUDGET:.0%}"
    rows = {r["search"]: r for r in doc["rows"] if r["slots"] == 1 and "regret_median" in r}
    if "random" not in rows:
        return []
    out = [
        f"Goal at {b} of the grid's cost (issue 36): median regret <= {GOAL_REGRET:.0%}, and "
        "mean regret below random search's (at the same screening and confirmation), paired by "
        "seed, the bootstrap 95% interval excluding zero."
    ]
    for d in doc.get("paired", {}).values():
        name, r = d["search"], rows.get(d["search"])
        if name not in ("tuner", "tuner + screening", DEFAULT.name) or r is None:
            continue
        like = d["against"] != "random" or name == "tuner"
        if not like and name != DEFAULT.name:
            continue  # tuner + screening meets random + screening
        diff = d["regret"][b]
        lo, hi = diff["interval"]
        met = r["regret_median"][b] <= GOAL_REGRET and hi < 0
        text = (
            f"- {name}: median {r['regret_median'][b]:.1%}; minus {d['against']}: "
            f"{diff['diff'] * 100:+.1f} points ({lo * 100:+.1f} to {hi * 100:+.1f})"
        )
        if "oracle_regret" in d:
            nv = d["oracle_regret"][b]
            text += (
                f", the best config it had run {nv['diff'] * 100:+.1f} "
                f"({nv['interval'][0] * 100:+.1f} to {nv['interval'][1] * 100:+.1f})"
            )
        out.append(text + (": met." if met else ": not met."))
    plain = rows.get("tuner", {}).get("baseline", {}).get(b)
    if plain is not None and plain >= 0.5:
        out.append(
            f"- Without confirmation (`--confirm 0`) tuner exported the baseline in {plain:.0%} of "
            "the seeds, as random search did: one run of a config rarely passes the export "
            "rule's paired test (Holm over every config, between-run noise included)."
        )
    return out


def readme_verdict(doc: dict[str, Any]) -> str:
    """`regret_lines` in a paragraph: the goal, the shipped study against random search."""
    b = f"{GOAL_BUDGET:.0%}"
    rows = {r["search"]: r for r in doc["rows"] if r["slots"] == 1 and "regret_median" in r}
    parts = []
    shipped = rows.get(DEFAULT.name)
    for d in doc["paired"].values():
        # The searches without confirmation export the baseline (the last sentence says how
        # often): their regret differences are the file's, the shipped study's are the README's.
        if shipped is None or d["search"] != DEFAULT.name:
            continue
        e, o = d["regret"][b], d["oracle_regret"][b]
        (lo, hi), (olo, ohi) = e["interval"], o["interval"]
        met = shipped["regret_median"][b] <= GOAL_REGRET and hi < 0
        parts.append(
            f"minus {d['against']} {e['diff'] * 100:+.1f} points ({lo * 100:+.1f} to "
            f"{hi * 100:+.1f}) [{o['diff'] * 100:+.1f}, {olo * 100:+.1f} to {ohi * 100:+.1f}]: "
            + ("met" if met else "not met")
        )
    out = (
        f"Goal at {b} of the grid's cost (issue 36): median regret <= {GOAL_REGRET:.0%} and mean "
        "regret below random search's, paired by seed (bootstrap 95%; of the best config already "
        "run, in brackets)."
    )
    if shipped is not None and parts:
        out += (
            f" {DEFAULT.name}: median {shipped['regret_median'][b]:.1%}; " + "; ".join(parts) + "."
        )
    plain = rows.get("tuner", {}).get("baseline", {}).get(b)
    if plain is not None and plain >= 0.5:
        out += (
            f" Without confirmation tuner exported the baseline in {plain:.0%} of the seeds, as "
            "random search did: one run rarely passes the export rule's paired test."
        )
    return out


def _write(
    path: Path,
    lines: list[str],
    rows: list[dict[str, Any]],
    grid: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The table as Markdown (with the command and the date), and its cells as JSON."""
    command = "python benchmarks/sample_efficiency.py " + " ".join(sys.argv[1:])
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
README_SEARCHES = (
    "tuner",
    "tuner + screening",
    "random",
    "random + screening",
    "grid in order",
    DEFAULT.name,
    RANDOM_DEFAULT.name,
)


_GLUE = re.compile(r"(\d) (s|min|tasks/h|configs|seeds|points|runs)\b")


def _wrap(text: str) -> list[str]:
    """Lines of at most 100 characters that never split a figure from its unit."""
    glued = _GLUE.sub(lambda m: f"{m.group(1)}\x00{m.group(2)}", text)
    return [x.replace("\x00", " ") for x in textwrap.wrap(glued, 100, break_on_hyphens=False)]


def table_lines(rows: list[dict[str, Any]], names: tuple[str, ...] = README_SEARCHES) -> list[str]:
    """The README's table (one slot): regret (mean, median) and hit at each budget."""
    budgets = list(rows[0]["hit"])
    regret = all("regret_mean" in r for r in rows)
    head = ([f"regret@{b} mean (median)" for b in budgets] if regret else []) + [
        f"hit@{b}" for b in budgets
    ]
    out = [
        "| search | " + " | ".join(head) + " | trials (median) |",
        "|---|" + "---|" * len(head) + "---|",
    ]
    for name in names:
        for r in rows:
            if r["search"] != name or r["slots"] != 1:
                continue
            cells = []
            if regret:
                cells += [
                    f"{r['regret_mean'][b]:.1%} ({r['regret_median'][b]:.1%})" for b in budgets
                ]
            for b in budgets:
                cell = f"{r['hit'][b]:.0%}"
                if r.get("cost"):
                    cell += f" (cost {r['cost'][b]:.0%})"
                cells.append(cell)
            out.append(f"| {name} | " + " | ".join(cells) + f" | {r['trials']:.0f} |")
    return out


def render_readme(doc: dict[str, Any]) -> str:
    """The README's section (between BEGIN and END) from what a run wrote (its JSON)."""
    if doc.get("kind") == "total-budget":
        return render_total(doc)
    grid = doc["grid"]
    files = [doc["out"], Path(doc["out"]).with_suffix(".json").as_posix()]
    src = f"<!-- source: {', '.join(files)} -->"
    intro = (
        f"Replayed over a grid recorded on the real CPU build (`{doc['command']}`, "
        f"{grid['took_s']} s, no vLLM; replay mode: load shape): {grid['configs']} configs"
        f" ({grid.get('space', '')}), {grid['cost_min']} min to run them all."
    )
    world = doc.get("world")
    if world:
        intro += (
            " regret@B: 1 - mu(export) / max mu after B of the grid's cost, one slot, "
            + (
                f"seed s of {grid['seeds']} replaying posterior draw s of the truth"
                if world == "posterior"
                else f"{grid['seeds']} seeds judged over every posterior draw"
            )
            + '; hit: regret <= 5%; "+ screening": a candidate stops at a rung when even its '
            "optimistic rate cannot reach the best trial's."
        )
    if grid.get("noise"):
        intro += f" Noise: {grid['noise']}."
    out = [BEGIN, src, *_wrap(intro)]
    if truth := truth_text(doc["grid"].get("truth")):
        t_src = f"<!-- source: {', '.join([*files, grid['truth']['file']])} -->"
        out += ["", t_src, *_wrap(truth)]
    out += ["", src, *table_lines(doc["rows"])]
    if doc.get("paired"):
        out += ["", src, *_wrap(readme_verdict(doc))]
    else:
        out += ["", src, *_wrap(" ".join(x.removeprefix("- ") for x in doc.get("verdict", [])))]
    out.append(END)
    return "\n".join(out)


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


def md_table(rows: list[dict[str, Any]], header: str, took: float) -> list[str]:
    """The printed lines: a header line, the Markdown table (every search and slot count), the
    time."""
    budgets = list(rows[0]["hit"])
    head = " | ".join(
        [f"regret@{b} mean (median)" for b in budgets] + [f"hit@{b}" for b in budgets]
    )
    lines = [header, "", f"| search | slots | {head} | reach (median) | trials (median) |"]
    lines.append("|---|---|" + "---|" * (2 * len(budgets)) + "---|---|")
    for r in rows:
        cells = [f"{r['regret_mean'][b]:.1%} ({r['regret_median'][b]:.1%})" for b in budgets]
        for b in budgets:
            cell = f"{r['hit'][b]:.0%}"
            if r.get("cost"):
                cell += f" (cost {r['cost'][b]:.0%})"
            cells.append(cell)
        reach = f"{r['reach']:.0%}" if r.get("reach") is not None else "-"
        lines.append(
            f"| {r['search']} | {r['slots']} | {' | '.join(cells)} | {reach} | {r['trials']:.0f} |"
        )
    lines.append(f"({took:.0f} s)")
    if all("naive_regret" in r for r in rows):
        lines += [
            "",
            "The same finished trials, other picks (mean regret): the highest single run "
            "(naive), and the best of them by the world's means (oracle: any pick's ceiling).",
            "",
            "| search | slots | " + " | ".join(f"naive@{b} | oracle@{b}" for b in budgets) + " |",
            "|---|---|" + "---|" * (2 * len(budgets)),
        ]
        for r in rows:
            cells = " | ".join(
                f"{r['naive_regret'][b]:.1%} | {r['oracle_regret'][b]:.1%}" for b in budgets
            )
            lines.append(f"| {r['search']} | {r['slots']} | {cells} |")
    return lines


def paired_lines(paired: dict[str, Any]) -> list[str]:
    """Each search minus random search, paired by seed, with its bootstrap interval."""
    out = [
        "",
        "Paired against random search (same seeds and truth draws; bootstrap 95% over seeds):",
    ]
    for name, d in paired.items():
        cells = []
        for b, e in d["regret"].items():
            lo, hi = e["interval"]
            h = d["hit"][b]
            cell = (
                f"{b}: regret {e['diff'] * 100:+.1f} points ({lo * 100:+.1f} to {hi * 100:+.1f}), "
                f"hit {h['diff'] * 100:+.0f} ({h['interval'][0] * 100:+.0f} to "
                f"{h['interval'][1] * 100:+.0f})"
            )
            for field, word in (("naive_regret", "naive"), ("oracle_regret", "oracle")):
                if field in d:
                    nv = d[field][b]
                    cell += (
                        f", {word} {nv['diff'] * 100:+.1f} ({nv['interval'][0] * 100:+.1f}"
                        f" to {nv['interval'][1] * 100:+.1f})"
                    )
            cells.append(cell)
        out.append(f"- {name}: " + "; ".join(cells))
    return out


def render_total(doc: dict[str, Any]) -> str:
    """The README's section from a `--total-budget` run: every row at an equal total cost."""
    from _se_budget import SELECT_FROM, verdict
    from _se_budget import table_lines as total_table

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
