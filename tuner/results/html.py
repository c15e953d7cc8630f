"""One self-contained HTML page for a study: summary, tables, and the plots inlined as base64.

The page loads nothing from anywhere (no scripts, fonts, styles or images by URL), so it can be
mailed, attached to a ticket or opened on a machine without network.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from html import escape

from tuner.results.report import TEXT_COLUMNS, ReportTable, report_tables, summary_lines
from tuner.results.rows import StudyResults

__all__ = ["render_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #1d3557; }
table { border-collapse: collapse; margin: 1rem 0 2rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccd; padding: 0.3rem 0.6rem; text-align: right; }
th { background: #f1faee; }
.text { text-align: left; }
img { max-width: 100%; display: block; margin: 1rem 0; }
"""


def _table(t: ReportTable) -> str:
    # Numbers align right, words left (the same columns as in the terminal).
    kinds = [' class="text"' if c in TEXT_COLUMNS else "" for c in t.columns]
    head = "".join(f"<th{k}>{escape(c)}</th>" for k, c in zip(kinds, t.columns, strict=True))
    body = "".join(
        "<tr>"
        + "".join(f"<td{k}>{escape(cell)}</td>" for k, cell in zip(kinds, row, strict=True))
        + "</tr>"
        for row in t.rows
    )
    return (
        f"<h2>{escape(t.title)}</h2>\n"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def render_html(results: StudyResults, pngs: Mapping[str, bytes]) -> str:
    """The report page; `pngs` maps file names to PNG bytes (as `render_plots` returns)."""
    title = f"tuner report: {results.study_name}"
    summary = "".join(f"<li>{escape(line)}</li>" for line in summary_lines(results))
    tables = "\n".join(_table(t) for t in report_tables(results))
    images = "\n".join(
        f'<figure><img alt="{escape(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"></figure>'
        for name, png in pngs.items()
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n"
        f"<body><h1>{escape(title)}</h1><ul>{summary}</ul>\n{tables}\n"
        f"<h2>Plots</h2>\n{images}\n</body></html>\n"
    )
