"""Write a study's report directory: report.md, the PNG plots and the self-contained report.html.

The one function the CLI calls for `tuner report --out DIR`; it renders each plot once and uses
the same bytes for the PNG files and the HTML page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.errors import ConfigError
from tuner.results.html import render_html
from tuner.results.report import report_markdown
from tuner.results.rows import StudyResults

__all__ = ["ReportFiles", "write_report"]


@dataclass(frozen=True)
class ReportFiles:
    """What `write_report` wrote."""

    markdown: Path
    html: Path
    plots: dict[str, Path]


def write_report(results: StudyResults, out_dir: Path) -> ReportFiles:
    """Write report.md, report.html and one PNG per plot with data into `out_dir`.

    Raises:
        ConfigError: `out_dir` cannot be created or written.
    """
    # matplotlib is imported by `tuner report` alone, so export and optimize run without it.
    from tuner.results.plots import render_plots

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        pngs = render_plots(results)
        plots = {}
        for name, png in pngs.items():
            plots[name] = out_dir / name
            plots[name].write_bytes(png)
        markdown = out_dir / "report.md"
        markdown.write_text(report_markdown(results, list(pngs)))
        html = out_dir / "report.html"
        html.write_text(render_html(results, pngs))
    except OSError as exc:
        raise ConfigError(
            f"cannot write the report into {out_dir}: {exc.strerror}; choose another --out"
        ) from None
    return ReportFiles(markdown=markdown, html=html, plots=plots)
