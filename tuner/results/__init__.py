"""Results users act on: load a study, export the server to run, write the report.

`load_results` reads a study (Optuna trials joined with tuner's tables) into frozen rows;
`choose_export`/`render_export` give the `vllm serve` command to deploy; `write_report` writes
tables, plots and a self-contained HTML page.
"""

from tuner.results.export import ExportChoice, choose_export
from tuner.results.export_render import FORMATS, render_export, serve_argv
from tuner.results.files import ReportFiles, write_report
from tuner.results.report import ReportTable, report_tables
from tuner.results.rows import StudyResults, TrialRow
from tuner.results.study_reader import (
    ReuseCounts,
    load_results,
    open_optuna_storage,
    resolve_study_name,
)

__all__ = [
    "FORMATS",
    "ExportChoice",
    "ReportFiles",
    "ReportTable",
    "ReuseCounts",
    "StudyResults",
    "TrialRow",
    "choose_export",
    "load_results",
    "open_optuna_storage",
    "render_export",
    "report_tables",
    "resolve_study_name",
    "serve_argv",
    "write_report",
]
