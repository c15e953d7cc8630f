"""Words that match the mode in every output: export's five formats, the report (Markdown,
HTML, its plots), the dashboard's note and the progress lines.

Live grades answers: "successful tasks/h". Replay and traces grade nothing: "completed tasks/h".
Each output is rendered from a real SQLite study (`tuner.testing.sample`) recorded in each mode.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.results import FORMATS, choose_export, load_results, render_export, write_report
from tuner.results.dashboard import study_note
from tuner.results.plots import history_series, kv_cache_series, tasks_per_hour_series
from tuner.study.search.progress import workload_line
from tuner.study.space import load_preset
from tuner.testing.sample import SampleScore, write_sample_study

RIGHT = {"live": "successful tasks/h", "replay": "completed tasks/h", "traces": "completed tasks/h"}
WRONG = {"live": "completed tasks/h", "replay": "successful", "traces": "successful"}


@pytest.fixture(scope="module", params=["live", "replay", "traces"])
def study(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path_factory.mktemp(request.param) / 'study.db'}"
    # n-gram wins in one study, the baseline in the other: both reasons are worded.
    write_sample_study(
        url, mode=request.param, ngram=SampleScore(900.0, 850.0, 950.0),
        confirm=((752.0, 900.0), (760.0, 905.0)),
    )  # fmt: skip
    write_sample_study(url, study_name="loses", mode=request.param)
    return url, request.param


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_export_format_says_the_modes_words(study: tuple[str, str], fmt: str) -> None:
    url, mode = study
    for name in ("sample", "loses"):
        text = render_export(choose_export(load_results(url, name)), fmt)
        assert WRONG[mode] not in text, (name, text)
        if fmt == "json":
            doc = json.loads(text)
            key = "successful_tasks_per_hour" if mode == "live" else "completed_tasks_per_hour"
            assert key in doc["measured"] and key in doc["baseline"]
        else:
            assert f"# {RIGHT[mode]}: " in text, text
        if fmt == "yaml":
            assert yaml.safe_load(text)["mode"] == mode


def test_the_report_and_its_plots_say_the_modes_words(
    study: tuple[str, str], tmp_path: Path
) -> None:
    url, mode = study
    results = load_results(url, "sample")
    files = write_report(results, tmp_path / "report")
    for path in (files.markdown, files.html):
        text = Path(path).read_text()
        assert f"{RIGHT[mode]} [interval]" in text, path
        assert WRONG[mode] not in text, path
    axis = "successful tasks / hour" if mode == "live" else "completed tasks / hour"
    series = (tasks_per_hour_series(results), kv_cache_series(results), history_series(results))
    assert {s.measure for s in series} == {axis}


def test_the_dashboard_note_says_the_modes_words(study: tuple[str, str]) -> None:
    url, mode = study
    note = study_note(load_results(url, "sample"))
    assert f"confirmed {RIGHT[mode]}" in note and WRONG[mode] not in note


def test_the_progress_lines_say_the_modes_words(tmp_path: Path) -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    assert workload_line(preset).startswith("workload: replay (load shape: answers not graded)")
    assert workload_line(preset).endswith("scored in completed tasks/h")
    traces = tmp_path / "calls.jsonl"
    w = preset.workload.model_copy(update={"traces": str(traces)})
    line = workload_line(preset.model_copy(update={"workload": w}))
    assert line.startswith("workload: traces (replayed calls.jsonl) (your recorded traces")
    live = preset.model_copy(
        update={"workload": preset.workload.model_copy(update={"mode": "live"})}
    )
    assert workload_line(live).endswith("scored in successful tasks/h")
