"""`tuner report`: the table cells, their Markdown and terminal layouts, and the files written."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from tuner.cli import main
from tuner.results import load_results, report_tables
from tuner.results.report import NOT_MEASURED, report_markdown, to_markdown, to_rich
from tuner.testing.sample import write_sample_study


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('report') / 'study.db'}"
    write_sample_study(url)
    return url


def test_config_table_cells(sample_url: str) -> None:
    table = report_tables(load_results(sample_url))[0]
    assert table.column("trial") == ["#0", "#1", "#4", "#5"]
    assert table.column("config") == [
        "no speculation, KV 2.00 GB, max seqs 8 (baseline)",
        "n-gram depth 3 (lookup 2-5), KV 2.00 GB, max seqs 8",
        "MTP depth 1, KV 2.00 GB, max seqs 8 (pruned at 4 tasks)",
        "control for #1: no speculation cut to its KV cache",
    ]
    assert table.column("plain tokens/s, 1 stream") == ["40.0", "64.0", NOT_MEASURED, NOT_MEASURED]
    assert table.column("plain tokens/s, 8 streams")[:2] == ["150.6", "200.0"]
    assert table.column("KV cache tokens") == ["36,253", "27,405", "19,727", "27,405"]
    assert table.column("completed")[:2] == ["3/3", "2/3"]  # replay: nothing graded
    assert table.column("completed tasks/h [interval]") == [
        "752 [730, 770]",
        "648 [620, 680]",
        "300 [250, 350]",
        "467 [440, 490]",
    ]
    assert table.column("prompt tokens from cache")[:2] == ["78%", "61%"]
    assert table.column("reuse: all")[:2] == ["78%", "33%"]  # 7/9 and 3/9
    assert table.column("reuse: one block short")[:2] == ["0%", "33%"]
    assert table.column("reuse: partial")[:2] == ["11%", "22%"]
    assert table.column("reuse: none")[:2] == ["11%", "11%"]
    assert table.column("preemptions")[:2] == ["0", "2"]
    assert table.column("energy per completed task")[:2] == [NOT_MEASURED, "2,500 J"]


def test_trials_that_did_not_run_get_their_own_table(sample_url: str) -> None:
    tables = report_tables(load_results(sample_url))
    # configs, did not run, and the "why" table of the finished KV-cut control of #1
    assert [t.title for t in tables][1:] == [
        "Configs that did not run",
        "Why trial #1 scored what it did",
    ]
    assert tables[1].rows == (
        (
            "#2",
            "n-gram depth 5, KV 2.00 GB, max seqs 8",
            "infeasible",
            "no_cache_memory",
            "No available memory for the cache blocks.",
        ),
        ("#3", "no speculation, KV 2.00 GB, max seqs 4", "failed", "unknown", "Engine core died"),
    )


def test_markdown_table_has_one_line_per_row(sample_url: str) -> None:
    table = report_tables(load_results(sample_url))[0]
    lines = to_markdown(table).splitlines()
    assert lines[0] == "## Configs measured"
    assert lines[2].count("|") == len(table.columns) + 1
    assert lines[4].startswith("| #0 | no speculation, KV 2.00 GB, max seqs 8 (baseline) | 40.0 |")
    assert len(lines) == 4 + len(table.rows)


def test_report_markdown_names_the_export_and_links_images(sample_url: str) -> None:
    text = report_markdown(load_results(sample_url), ["history.png"])
    assert (
        "- Export: trial #0 (no speculation, KV 2.00 GB, max seqs 8): unconfirmed: no speculation"
        in text
    )
    assert "- 6 trials: 4 measured, 2 did not run" in text
    assert "![history.png](history.png)" in text


def test_rich_table_shows_every_cell(sample_url: str) -> None:
    table = report_tables(load_results(sample_url))[0]
    console = Console(width=400, record=True)
    console.print(to_rich(table))
    text = console.export_text()
    for cell in ("752 [730, 770]", "27,405", "2,500 J", NOT_MEASURED):
        assert cell in text


def test_cli_report_writes_markdown_html_and_pngs(
    sample_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    with pytest.raises(SystemExit) as info:
        main(["report", "--storage", sample_url, "--out", str(out)])
    assert info.value.code == 0
    printed = capsys.readouterr().out
    for title in ("Scores", "Diagnostics", "Configs that did not run", "752 [730, 770]"):
        assert title in printed
    assert sorted(p.name for p in out.iterdir()) == [
        "acceptance_by_position.png",
        "history.png",
        "report.html",
        "report.md",
        "reuse_classes.png",
        "tasks_per_hour.png",
        "tasks_vs_kv_cache.png",
    ]
    assert (out / "report.md").read_text() == report_markdown(
        load_results(sample_url),
        [
            "tasks_per_hour.png",
            "tasks_vs_kv_cache.png",
            "acceptance_by_position.png",
            "reuse_classes.png",
            "history.png",
        ],
    )
    assert (out / "history.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_the_config_column_says_which_screening_rung_each_trial_reached() -> None:
    from tuner.results.rows import StudyResults, TrialRow

    def row(number: int, state: str, **kw: object) -> TrialRow:
        return TrialRow(
            number=number, state=state, role="baseline" if number == 0 else "candidate",
            params={"method": "none" if number == 0 else "ngram", "num_speculative_tokens": 2,
                    "kv_cache_memory_bytes": 2_000_000_000, "max_num_seqs": 8},
            value=900.0 if state == "complete" else None, tasks_per_hour=900.0, **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    results = StudyResults(
        study_name="s", storage="memory", model=None, gpu=None, mode="replay",
        trials=(row(0, "complete"), row(1, "complete", rung=2),
                row(2, "pruned", pruned_at_tasks=3, screened_out_rung=1),
                row(3, "pruned", pruned_at_tasks=5)),
    )  # fmt: skip
    configs = report_tables(results)[0].column("config")
    assert configs[1].endswith("(passed screening rung 2)")
    assert configs[2].endswith("(screened out at rung 1 at 3 tasks)")
    assert configs[3].endswith("(pruned at 5 tasks)")
    assert "rung" not in configs[0]
