"""The report's tables: per config, the published table's columns (docs/workload.md), as text cells.

`report_tables` turns a study into `ReportTable`s (plain strings, "not measured" where a value is
None); `to_markdown` and `to_rich` only lay them out, so tests check the cells once for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rich.table import Table
from rich.text import Text

from tuner.attrs import ControlKind, Role
from tuner.errors import StudyError
from tuner.metrics.drift import detect_trend, first_round_gap
from tuner.results.attribution import attribute
from tuner.results.decision import Verdict, judge_study
from tuner.results.export import choose_export
from tuner.results.load_sweep import load_lines, load_table_rows
from tuner.results.rows import StudyResults, TrialRow
from tuner.results.words import DUMMY_WEIGHTS_LINE, mode_line, tph_label, worded
from tuner.workload.reuse import COUNTED_REUSE_CLASSES

__all__ = [
    "CONFIG_COLUMNS",
    "NOT_MEASURED",
    "TEXT_COLUMNS",
    "ReportTable",
    "baseline_drift_line",
    "config_table",
    "not_run_table",
    "report_markdown",
    "report_tables",
    "summary_lines",
    "terminal_tables",
    "to_markdown",
    "to_rich",
    "why_tables",
]

NOT_MEASURED: Final = "not measured"
CONFIG_COLUMNS: Final = (
    "trial",
    "config",
    "plain tokens/s, 1 stream",
    "plain tokens/s, 8 streams",
    "KV cache tokens",
    "solved",
    "successful tasks/h [interval]",
    "prompt tokens from cache",
    "reuse: all",
    "reuse: one block short",
    "reuse: partial",
    "reuse: none",
    "preemptions",
    "energy per successful task",
    "search-time vs confirmed tasks/h",
    "paired vs baseline",
    "outputs",
)
_NOT_RUN_COLUMNS: Final = ("trial", "config", "outcome", "failure kind", "reason")
TEXT_COLUMNS: Final = frozenset({"trial", "config", "outcome", "failure kind", "reason"})
# Fourteen columns do not fit a terminal: it shows the scores and the diagnostics apart.
_TERMINAL_SPLIT: Final = (
    ("Scores", CONFIG_COLUMNS[:2] + CONFIG_COLUMNS[4:8] + CONFIG_COLUMNS[12:13]),
    ("Confirmation and correctness", CONFIG_COLUMNS[:2] + CONFIG_COLUMNS[14:]),
    (
        "Diagnostics",
        CONFIG_COLUMNS[:1] + CONFIG_COLUMNS[2:4] + CONFIG_COLUMNS[8:12] + CONFIG_COLUMNS[13:14],
    ),
)


@dataclass(frozen=True)
class ReportTable:
    """A titled table of text cells."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def select(self, title: str, columns: tuple[str, ...]) -> ReportTable:
        """The same rows with only `columns`, in that order."""
        idx = [self.columns.index(c) for c in columns]
        return ReportTable(title, columns, tuple(tuple(row[i] for i in idx) for row in self.rows))

    def column(self, name: str) -> list[str]:
        """The cells of one column, top to bottom."""
        i = self.columns.index(name)
        return [row[i] for row in self.rows]


def _or_nm(value: object, fmt: str = "{}") -> str:
    return NOT_MEASURED if value is None else fmt.format(value)


def _interval(t: TrialRow) -> str:
    if t.tasks_per_hour is None:
        return NOT_MEASURED
    if t.tasks_per_hour_low is None or t.tasks_per_hour_high is None:
        return f"{t.tasks_per_hour:,.0f}"
    return f"{t.tasks_per_hour:,.0f} [{t.tasks_per_hour_low:,.0f}, {t.tasks_per_hour_high:,.0f}]"


def _config(t: TrialRow) -> str:
    label = t.label
    if t.role == Role.BASELINE:
        label += " (baseline)"
    at = f" at {t.pruned_at_tasks} tasks" if t.pruned_at_tasks is not None else ""
    if t.state == "pruned" and t.screened_out_rung is not None:
        label += f" (screened out at rung {t.screened_out_rung}{at})"
    elif t.state == "pruned":
        label += f" (pruned{at})"
    elif t.rung is not None:
        label += f" (passed screening rung {t.rung})"
    return label


def _runs(v: Verdict) -> str:
    # The spread of the repeats is the run-to-run noise the user should expect.
    if v.confirmed_runs == 1 or v.confirmed_range is None:
        return f"{v.confirmed_runs} run"
    low, high = v.confirmed_range
    return f"{v.confirmed_runs} runs, {low:,.0f}-{high:,.0f}"


def _verdict_cells(t: TrialRow, v: Verdict | None) -> tuple[str, str, str]:
    if v is None:
        return ("reference" if t.role == Role.BASELINE else "", "", "")
    search = _or_nm(v.search_tph, "{:,.0f}")
    confirmed = (
        f"{v.confirmed_tph:,.0f} ({_runs(v)})" if v.confirmed_tph is not None else "not confirmed"
    )
    paired = v.paired.describe() if v.paired is not None else NOT_MEASURED
    if v.paired is not None and v.drift is not None:
        paired += f"; against {v.drift.describe()}"
    return (f"{search} vs {confirmed}", paired, v.correctness())


def _config_row(t: TrialRow, v: Verdict | None = None) -> tuple[str, ...]:
    solved = f"{t.successes}/{t.tasks}" if t.successes is not None and t.tasks is not None else None
    reuse = t.reuse.fractions() if t.reuse is not None else {}
    return (
        f"#{t.number}",
        _config(t),
        _or_nm(t.tokens_per_s.get(1), "{:,.1f}"),
        _or_nm(t.tokens_per_s.get(8), "{:,.1f}"),
        _or_nm(t.kv_cache_tokens, "{:,}"),
        _or_nm(solved),
        _interval(t),
        _or_nm(t.cache_hit_pct, "{:.0f}%"),
        *(_or_nm(reuse.get(name), "{:.0%}") for name in COUNTED_REUSE_CLASSES),
        _or_nm(t.preemptions, "{:,}"),
        _or_nm(t.energy_per_success_j, "{:,.0f} J"),
        *_verdict_cells(t, v),
    )


def _order(t: TrialRow) -> tuple[int, int]:
    # The baseline first (the reference every other row is read against), then by number.
    return (0 if t.role == Role.BASELINE else 1, t.number)


def config_table(results: StudyResults) -> ReportTable:
    """One row per measured config (completed, pruned and control trials).

    Replay and traces studies say "completed" where live ones say "solved": nobody graded.
    """
    verdicts = judge_study(results)
    rows = tuple(
        _config_row(t, verdicts.get(t.number)) for t in sorted(results.measured(), key=_order)
    )
    return ReportTable("Configs measured", _worded(CONFIG_COLUMNS, results), rows)


def _done_column(results: StudyResults) -> str:
    return "solved" if results.graded or results.mode is None else "completed"


def _worded(columns: tuple[str, ...], results: StudyResults) -> tuple[str, ...]:
    """Column names in the study's words: "completed tasks/h" where nothing was graded."""
    done = _done_column(results)
    return tuple(done if c == "solved" else worded(c, results.mode) for c in columns)


def not_run_table(results: StudyResults) -> ReportTable:
    """One row per trial that produced no score: infeasible configs and crashes."""
    rows = tuple(
        (
            f"#{t.number}",
            t.label,
            "infeasible" if t.infeasible else "failed",
            t.failure_kind or "unknown",
            t.failure_reason or "",
        )
        for t in results.not_run()
    )
    return ReportTable("Configs that did not run", _NOT_RUN_COLUMNS, rows)


_WHY_COLUMNS: Final = (
    "trial",
    "server",
    "successful tasks/h [interval]",
    "KV cache tokens",
    "reused all",
    "one block short",
    "reused nothing",
)


def _share(t: TrialRow, name: str) -> str:
    fractions = t.reuse.fractions() if t.reuse is not None else {}
    return f"{100 * fractions[name]:.0f}%" if name in fractions else NOT_MEASURED


def _all_share(t: TrialRow) -> float | None:
    return t.reuse.fractions().get("all") if t.reuse is not None else None


def why_tables(results: StudyResults) -> list[tuple[ReportTable, str]]:
    """For each explained candidate: the table of `tuner explain` and its one-line answer.

    Only where `tuner explain` ran a KV-cut control that finished; the numbers are the stored
    measurements of the baseline, the candidate and its controls.
    """
    base = results.baseline
    by_number = {t.number: t for t in results.trials}
    out: list[tuple[ReportTable, str]] = []
    if base is None or base.tasks_per_hour is None:
        return out
    candidates = sorted(
        {
            t.control_of
            for t in results.trials
            if t.role == Role.CONTROL and t.control_of is not None
        }
    )
    for number in candidates:
        candidate = by_number.get(number)
        controls = [t for t in results.trials if t.role == Role.CONTROL and t.control_of == number]
        kv_cut = next(
            (c for c in controls if c.control_kind == ControlKind.KV_CUT and c.feasible), None
        )
        if candidate is None or candidate.tasks_per_hour is None or kv_cut is None:
            continue
        rows = [base, candidate, *[c for c in controls if c.feasible]]
        table = ReportTable(
            f"Why trial #{number} scored what it did",
            _worded(_WHY_COLUMNS, results),
            tuple(
                (
                    f"#{t.number}",
                    "baseline" if t is base else t.label,
                    _interval(t),
                    _or_nm(t.kv_cache_tokens, "{:,}"),
                    _share(t, "all"),
                    _share(t, "one_block_short"),
                    _share(t, "none"),
                )
                for t in rows
            ),
        )
        assert kv_cut.tasks_per_hour is not None
        ref = kv_cut if kv_cut.reuse is not None else base
        answer = attribute(
            base.tasks_per_hour,
            candidate.tasks_per_hour,
            kv_cut.tasks_per_hour,
            reuse_candidate=_all_share(candidate),
            reuse_reference=_all_share(ref),
        )
        out.append((table, f"trial #{number}: {answer.sentence()}"))
    return out


def report_tables(results: StudyResults) -> list[ReportTable]:
    """The report's tables: configs; those that did not run; the explained losses."""
    tables = [config_table(results)]
    not_run = not_run_table(results)
    if not_run.rows:
        tables.append(not_run)
    tables += [table for table, _ in why_tables(results)]
    if results.sweep is not None:  # `tuner sweep`: the finalists against the number of agents
        columns, rows = load_table_rows(results.sweep)
        tables.append(ReportTable("Load sweep (tuner sweep)", columns, rows))
    return tables


def terminal_tables(results: StudyResults) -> list[ReportTable]:
    """The report's tables cut to terminal width: scores, diagnostics, trials that did not run."""
    tables = report_tables(results)
    config = tables[0]
    return [
        config.select(title, _worded(cols, results)) for title, cols in _TERMINAL_SPLIT
    ] + tables[1:]


def summary_lines(results: StudyResults) -> list[str]:
    """What the study is and what `tuner export` would hand out, in a few lines."""
    where = ", ".join(
        x for x in (results.model and f"model {results.model}", results.gpu and results.gpu) if x
    )
    lines = [
        f"Study {results.study_name!r}"
        + (f" ({where})" if where else "")
        + f" in {results.storage}",
        f"{len(results.trials)} trials: {len(results.measured())} measured, "
        f"{len(results.not_run())} did not run",
    ]
    if results.mode:
        lines.append(f"Workload mode: {mode_line(results.mode, results.mode_note)}")
    if results.dummy_weights:
        lines.append(f"Weights: {DUMMY_WEIGHTS_LINE}")
    for v in judge_study(results).values():
        if v.confirmed:
            lines.append(
                f"Confirmed #{v.trial.number} ({v.trial.label}): search-time "
                f"{_or_nm(v.search_tph, '{:,.0f}')} {tph_label(results.mode)}, confirmed "
                f"{_or_nm(v.confirmed_tph, '{:,.0f}')} over {v.confirmed_runs} fresh starts"
            )
        if v.changes_outputs:
            lines.append(f"#{v.trial.number} changes outputs, never exported: {v.correctness()}")
            firsts = _divergence_words(v)
            lines += [f"#{v.trial.number} first divergences: {firsts}"] if firsts else []
        problems = v.problems()
        if problems:
            never = ", never exported" if v.unreliable else ""
            lines.append(f"#{v.trial.number}{never}: {problems}")
    drift = baseline_drift_line(results)
    lines += [drift] if drift else []
    lines += [f"Why {sentence}" for _, sentence in why_tables(results)]
    lines += [f"Load: {line}" for line in load_lines(results.sweep)] if results.sweep else []
    try:
        choice = choose_export(results)
    except StudyError as exc:
        lines.append(f"Nothing to export yet: {exc.message}")
    else:
        t = choice.trial
        lines.append(f"Export: trial #{t.number} ({t.label}): {choice.reason}")
    return lines


def _divergence_words(v: Verdict) -> str | None:
    """Where the probe's answers first left the baseline's, prompt by prompt (at most 6)."""
    check = v.outputs
    if check is None or not check.divergences:
        return None
    words = [
        f"prompt {d.prompt} at token {d.position} "
        + (
            f"({d.kind.replace('_', '-')}, margin {'>= ' if d.margin_is_bound else ''}"
            f"{d.margin:.2f} nats)"
            if d.margin is not None
            else "(no log-probabilities)"
        )
        for d in check.divergences[:6]
    ]
    more = len(check.divergences) - len(words)
    return "; ".join(words) + (f"; {more} more" if more > 0 else "")


def baseline_drift_line(results: StudyResults) -> str | None:
    """The baseline's tasks/h over its fresh starts (search run, then confirmation rounds): a
    trend is said, not averaged away (`tuner.metrics.drift`); None under 3 starts."""
    base = results.baseline
    if base is None:
        return None
    runs = [base, *results.confirm_runs(base.number)]
    values = [t.tasks_per_hour for t in runs if t.tasks_per_hour is not None]
    if len(values) < 3:
        return None
    trend = detect_trend(values)
    gap = first_round_gap(values)
    figures = ", ".join(f"{v:,.0f}" for v in values)
    text = (
        f"Drift: baseline #{base.number} over {len(values)} fresh starts ({figures} tasks/h): "
        + trend.describe("baseline's tasks/h")
        + ("" if gap is None else f"; start 1 vs the later starts {gap:+.1%}")
    )
    if trend.found:
        text += (
            "; starts on this machine are not exchangeable, so every figure of this study "
            "carries the drift"
        )
    return text


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(table: ReportTable) -> str:
    """A GitHub-flavoured Markdown table with its title as a heading."""
    lines = [
        f"## {table.title}",
        "",
        "| " + " | ".join(_md_cell(c) for c in table.columns) + " |",
        "|" + "---|" * len(table.columns),
    ]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def report_markdown(results: StudyResults, images: list[str] | None = None) -> str:
    """The whole report.md: summary, tables and (relative) links to the PNGs."""
    parts = [f"# tuner report: {results.study_name}", ""]
    parts += [f"- {line}" for line in summary_lines(results)]
    parts.append("")
    parts += [to_markdown(t) for t in report_tables(results)]
    for name in images or []:
        parts.append(f"![{name}]({name})\n")
    return "\n".join(parts)


def to_rich(table: ReportTable) -> Table:
    """A rich table for the terminal (numbers right-aligned)."""
    out = Table(title=table.title, show_lines=False)
    for name in table.columns:
        out.add_column(Text(name), justify="left" if name in TEXT_COLUMNS else "right")
    for row in table.rows:
        out.add_row(*(Text(cell) for cell in row))  # cells are data, never rich markup
    return out
