"""Results of a real CPU study: the exported command launches the same server, the report is
filled from measurements, and the dashboard shows the study in a browser.

`cpu_study` (tests/e2e/conftest.py) runs the study once per session. The export test starts one
real vLLM server (two when the export is the baseline: then the best speculative trial's
command is launched too, so that the speculative config survives the shell for real).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from matplotlib.image import imread

from tests.e2e.conftest import CpuStudy, tuner_env
from tests.integration.test_dashboard import (
    assert_screenshot_shows_a_page,
    render_in_chromium,
    running_dashboard,
)
from tuner.results import StudyResults, TrialRow, choose_export, load_results, render_export
from tuner.results.export import ExportChoice
from tuner.results.plots import (
    acceptance_series,
    history_series,
    kv_cache_series,
    reuse_series,
    tasks_per_hour_series,
)
from tuner.results.report import NOT_MEASURED, config_table
from tuner.server import free_port, parse_cache_info
from tuner.settings import get_settings
from tuner.storage import Store

pytestmark = pytest.mark.vllm

_SPEC_IN_LOG = re.compile(
    r"speculative_config=(?:None|SpeculativeConfig\(method='(?P<method>[^']+)'.*?"
    r"num_spec_tokens=(?P<k>\d+)\))"
)


def _tuner(cpu_study: CpuStudy, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args, "--storage", cpu_study.storage_url],
        capture_output=True,
        text=True,
        env=tuner_env(cpu_study.cache_dir),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _cpu_script(exported: str, port: int) -> str:
    """The exported shell text with `vllm serve MODEL` replaced by the CPU launch command.

    Nothing else changes but the port, which is added so that the test never collides with
    another server on this machine (the export binds 127.0.0.1 and leaves the port default).
    Environment assignments the preset sets (NAME=value) stay in front, as exported.
    """
    # The export prints the `vllm serve` command first; on the CPU build a second block follows
    # with the command that ran on the measuring install. Take the first block only.
    first: list[str] = []
    for line in exported.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if first:
                break
            continue
        first.append(line)
    command = " ".join(line.removesuffix("\\") for line in first)
    words = shlex.split(command)
    env = []
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        env.append(words.pop(0))
    assert words[:2] == ["vllm", "serve"] and len(words) >= 3, command
    launch = get_settings().launch_command()
    model = [words[2]] if launch.model_positional else ["--model", words[2]]
    argv = [*launch.argv, *model, *words[3:], "--port", str(port)]
    return shlex.join(env) + (" " if env else "") + "exec " + shlex.join(argv) + "\n"


@contextmanager
def _launched(script: str, log_path: Path) -> Iterator[str]:
    """Run the script in bash in its own process group; yield the base URL once healthy."""
    port = int(script.rsplit("--port ", 1)[1].split()[0])
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            ["bash", "-c", script], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the exported server exited:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the exported server was not ready in 900 s"
            time.sleep(1.0)
        yield base
    finally:
        # The engine core and workers are separate processes: stop the whole group.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _check_launch(choice: ExportChoice, tmp_path: Path, name: str) -> None:
    trial = choice.trial
    script = _cpu_script(render_export(choice), free_port())
    log_path = tmp_path / f"{name}.log"
    with _launched(script, log_path) as base:
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
    kv = parse_cache_info(metrics).kv_cache_tokens
    assert kv is not None and kv == trial.kv_cache_tokens
    match = _SPEC_IN_LOG.search(log_path.read_text(errors="replace"))
    assert match is not None, "vLLM did not log its speculative config"
    assert (match["method"] or "none") == trial.method
    if trial.method != "none":
        assert int(match["k"]) == trial.params["num_speculative_tokens"]


@pytest.mark.extended  # out of CI since 2026-12-07: CI's minutes on a Zen 3 (docs/ci.md)
def test_exported_command_launches_the_trials_server(cpu_study: CpuStudy, tmp_path: Path) -> None:
    results = load_results(cpu_study.storage_url, cpu_study.study_name)
    choice = choose_export(results)
    # What the CLI prints is what is launched.
    assert _tuner(cpu_study, "export", "--study", cpu_study.study_name) == render_export(choice)
    _check_launch(choice, tmp_path, "exported")
    if choice.trial.method == "none":
        # The session study runs its n-gram candidates to the end (seed 7, no screening).
        speculative = [t for t in results.trials if t.exportable and t.method != "none"]
        assert speculative, [(t.number, t.method, t.exportable) for t in results.trials]
        best = max(speculative, key=lambda t: t.tasks_per_hour or 0.0)
        as_if_exported = ExportChoice(best, best, choice.baseline, "test", choice.study_name)
        _check_launch(as_if_exported, tmp_path, "speculative")


def _measured(url: str, study: str, trial: TrialRow) -> tuple[bool, bool]:
    """(throughput was measured, energy was measured) according to tuner's tables."""
    store = Store(url)
    try:
        runs = store.workload_runs(study, trial.number)
        energy = bool(runs) and runs[-1].record.energy_joules is not None
        return bool(store.throughput_runs(study, trial.number)), energy
    finally:
        store.close()


def test_report_of_the_real_study_is_filled_from_measurements(
    cpu_study: CpuStudy, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    printed = _tuner(cpu_study, "report", "--study", cpu_study.study_name, "--out", str(out))
    assert "Scores" in printed
    results: StudyResults = load_results(cpu_study.storage_url, cpu_study.study_name)
    table = config_table(results)
    complete = [t for t in results.measured() if t.state == "complete"]
    assert complete and table.rows
    rows = {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.rows}
    always = [
        "KV cache tokens",
        "completed",  # replay: tasks complete, nobody grades them
        "completed tasks/h [interval]",
        "prompt tokens from cache",
        "reuse: all",
        "reuse: one block short",
        "reuse: partial",
        "reuse: none",
        "preemptions",
    ]
    for trial in complete:
        row = rows[f"#{trial.number}"]
        for column in always:
            assert row[column] != NOT_MEASURED, (trial.number, column)
        assert row["KV cache tokens"] == f"{trial.kv_cache_tokens:,}"
        throughput, energy = _measured(cpu_study.storage_url, cpu_study.study_name, trial)
        if trial.role != "control":  # controls (from `tuner explain`) may skip the benchmark
            assert throughput, f"the CPU preset measures plain tokens/s; #{trial.number} has none"
        for streams in (1, 8):
            filled = row[f"plain tokens/s, {streams} stream{'s' if streams > 1 else ''}"]
            assert (filled != NOT_MEASURED) == (streams in trial.tokens_per_s)
        # No NVML on a CPU machine: energy is "not measured", never a made-up number.
        assert (row["energy per completed task"] == NOT_MEASURED) == (not energy)

    # The plots show the measured numbers, and their files are real images.
    bars = tasks_per_hour_series(results)
    assert bars.values == tuple(t.tasks_per_hour for t in sorted(complete, key=_order))
    assert all(lo <= v <= hi for lo, v, hi in zip(bars.lows, bars.values, bars.highs, strict=True))
    assert kv_cache_series(results).x == tuple(
        float(t.kv_cache_tokens or 0) for t in sorted(complete, key=_order)
    )
    reuse = reuse_series(results)
    assert len(reuse.labels) == len(complete)
    for i in range(len(reuse.labels)):
        assert sum(f[i] for f in reuse.fractions.values()) == pytest.approx(1.0)
    assert history_series(results).numbers
    if any(t.method == "ngram" for t in complete):
        assert acceptance_series(results), "an n-gram trial ran but no acceptance was plotted"
    for png in ("tasks_per_hour.png", "tasks_vs_kv_cache.png", "reuse_classes.png", "history.png"):
        pixels = imread(out / png)
        assert pixels[..., :3].std() > 0.05, png
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(list(out.glob("*.png")))


def _order(t: TrialRow) -> tuple[bool, int]:
    return (t.role != "baseline", t.number)


def test_dashboard_shows_the_real_study(cpu_study: CpuStudy, tmp_path: Path) -> None:
    with running_dashboard(cpu_study.storage_url, tmp_path / "dashboard.log") as base:
        assert cpu_study.study_name in render_in_chromium(f"{base}/dashboard", tmp_path)
        shot = tmp_path / "dashboard.png"
        render_in_chromium(f"{base}/dashboard/studies/1", tmp_path, screenshot=shot)
        # The answer, written by `tuner optimize` at its end, rendered from the study's note.
        note = render_in_chromium(f"{base}/dashboard/studies/1/note", tmp_path)
    assert "What to deploy: trial #" in note and "vllm serve" in note
    assert_screenshot_shows_a_page(shot)


@pytest.mark.filterwarnings("default::UserWarning")  # a re-run start is reported, not an error
def test_the_confirmation_stage_ran_on_the_real_build(cpu_study: CpuStudy) -> None:
    from tuner.results.decision import judge_study

    results = load_results(cpu_study.storage_url, cpu_study.study_name)
    runs = [t for t in results.trials if t.role == "confirm"]
    # One round: the baseline and the best candidate, each a fresh server start.
    assert [(t.confirm_of, t.confirm_round) for t in runs][:1] == [(0, 0)]
    seen = [
        (t.number, t.state, t.confirm_of, t.confirm_round, t.failure_kind, t.failure_reason)
        for t in runs
    ]
    # A baseline start that fails (CI's run of 2026-12-03 had one, on a Zen 3 box, its cause
    # not in the log) leaves its round unpaired and is started again (`BASELINE_ATTEMPTS`);
    # a candidate's failed start is not. The warning puts the cause in CI's summary.
    failed = [t for t in runs if t.state == "fail"]
    assert all(t.confirm_of == 0 for t in failed), seen
    if failed:
        warnings.warn(f"a baseline confirmation start failed and was re-run: {seen}", stacklevel=1)
    runs = [t for t in runs if t.state != "fail"]
    assert len(runs) == 2 and all(t.feasible for t in runs), seen
    assert all(t.probe is not None and len(t.probe.outputs) == 16 for t in runs)
    (confirmed,) = [v for v in judge_study(results).values() if v.confirmed]
    assert confirmed.paired is not None and confirmed.paired.rounds == 1
    # The second baseline start gives the probe's floor: greedy answers of two starts of the
    # same server, compared token by token.
    assert confirmed.outputs is not None and confirmed.outputs.floor is not None
    assert 0.0 < confirmed.outputs.floor <= 1.0
    table = config_table(results)
    row = dict(
        zip(
            table.columns,
            table.rows[[r[0] for r in table.rows].index(f"#{confirmed.trial.number}")],
            strict=True,
        )
    )
    assert row["search-time vs confirmed tasks/h"].endswith("(1 run)")
    text = render_export(choose_export(results))
    assert "# workload mode: replay (load shape: answers not graded)" in text
