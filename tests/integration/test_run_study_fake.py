"""`tuner.run_study`: the whole of `tuner optimize` as one library call, on stand-in servers.

A tiny study (`tuner.testing.fake_vllm`, a named fake: the point is the pipeline, not the
server) runs end to end in this process: the search, the confirmation stage and the dashboard
note, on a local Ray the call joins by its address, as a cluster. The start's reads are counted
by wrapping the real functions wherever they are looked up: the stored study is read once, the
Ray address checked once and the confirmation planned once (issue 45).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

import tuner
import tuner.study.pipeline as pipeline
import tuner.study.pipeline.start as pipeline_start
from tests.integration.conftest import fake_preset, fake_vllm_ray
from tuner.study import OptimizeOptions, Preset
from tuner.study.preflight import plan as preflight_plan
from tuner.study.search import driver, ray_session
from tuner.study.search.loop import StudyLoop
from tuner.study.search.progress import ProgressLines
from tuner.study.stages import confirm_plan
from tuner.study.stages.confirm_plan import ConfirmPlan

pytestmark = pytest.mark.ray

PRESET = fake_preset(
    {"FAKE_VLLM_STARTUP_S": "0.3", "FAKE_VLLM_TOKEN_DELAY_S": "0.002"},
    tasks=3,
    tool_latency_s=0.0,
    gpu={"name": "cpu", "cpu": True},
    throughput_streams=[1],
    throughput_requests=2,
    throughput_output_tokens=8,
    confirm={"top_k": 1, "rounds": 1},  # the preset's plan: the call is given none
)


@pytest.fixture
def ray_address() -> Iterator[str]:
    """A local Ray whose workers start the fake server as `vllm`, and its GCS address."""
    import ray

    with fake_vllm_ray(num_gpus=0):
        yield str(ray.get_runtime_context().gcs_address)


def _count(
    monkeypatch: pytest.MonkeyPatch, calls: Counter[str], name: str, *modules: ModuleType
) -> None:
    """Count the calls of `name` through every module that looks it up by that name."""
    real: Callable[..., Any] = getattr(modules[0], name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return real(*args, **kwargs)

    for module in modules:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, counted)


def test_run_study_runs_the_pipeline_and_reads_plans_and_checks_once_at_the_start(
    ray_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: Counter[str] = Counter()
    _count(
        monkeypatch, calls, "read_stored_study", preflight_plan, pipeline_start, pipeline, driver
    )
    _count(monkeypatch, calls, "check_ray_address", ray_session, pipeline, driver)
    _count(monkeypatch, calls, "plan_study", preflight_plan, driver)
    _count(monkeypatch, calls, "run_waiting", driver)
    _count(monkeypatch, calls, "parse_confirm", confirm_plan, pipeline)
    real_plan = ConfirmPlan.for_preset

    def for_preset(cls: type[ConfirmPlan], preset: Preset) -> ConfirmPlan:
        calls["for_preset"] += 1
        return real_plan(preset)

    monkeypatch.setattr(ConfirmPlan, "for_preset", classmethod(for_preset))
    at_start: list[Counter[str]] = []  # the counts when each loop began: the search's first
    real_run = StudyLoop.run

    def run(loop: StudyLoop) -> Any:
        at_start.append(Counter(calls))
        return real_run(loop)

    monkeypatch.setattr(StudyLoop, "run", run)

    url = f"sqlite:///{tmp_path / 'study.db'}"
    # A storage that exists, with no study yet: the start reads it (a SQLite file not there yet
    # is not read at all, since reading would create it).
    optuna.storages.RDBStorage(url).remove_session()
    lines = io.StringIO()
    options = OptimizeOptions(
        storage_url=url,
        cache_dir=tmp_path / "cache",
        n_trials=2,
        ray_address=ray_address,
        show_progress=False,
        progress=ProgressLines(stream=lines),
    )
    said: list[str] = []
    shown: dict[str, list[Any]] = {"searched": [], "confirmed": [], "published": []}
    hooks = pipeline.StudyHooks(
        searched=shown["searched"].append,
        confirmed=shown["confirmed"].append,
        published=shown["published"].append,
    )
    run_ = tuner.run_study(Preset.model_validate(PRESET), options, say=said.append, hooks=hooks)

    # The start: one read of the stored study (the search's plan used it), one check of the
    # address, one confirmation plan (the preset's), one preflight plan.
    start = at_start[0]
    assert start["read_stored_study"] == 1, start
    assert start["check_ray_address"] == 1, start
    assert start["for_preset"] + start["parse_confirm"] == 1, start
    assert start["plan_study"] == 1, start
    # The whole call: the address was never checked again (one Ray for every stage) and the
    # plan never made again; each confirmation run plans itself on the study the search left.
    assert calls["check_ray_address"] == 1, calls
    assert calls["for_preset"] + calls["parse_confirm"] == 1, calls
    assert calls["run_waiting"] >= 1, calls
    assert calls["plan_study"] == 1 + calls["run_waiting"], calls
    assert calls["read_stored_study"] == 1 + calls["run_waiting"], calls

    # What came back: the search, the confirmation with its verdicts, the dashboard note.
    assert isinstance(run_, tuner.StudyRun)
    assert run_.study_name == "fake-cpu" and run_.storage_url == url
    assert run_.confirm_plan == ConfirmPlan(1, 1)
    search = run_.search
    assert search is not None and search.finished == 2
    assert search.states == {"COMPLETE": 2}
    assert search.best_number in (0, 1) and search.best_value is not None
    assert shown["searched"] == [search]
    baseline, candidate = run_.confirmation.configs
    assert baseline == 0 and candidate == 1
    assert run_.confirmation.stopped is not None and run_.confirmation.stopped[0] == 1
    verdict = run_.verdicts[str(candidate)]
    assert verdict["confirmation_runs"] == 1
    assert verdict["confirmed_tasks_per_hour"] is not None
    assert shown["confirmed"] == [run_.confirmation]
    assert run_.sweep is None  # the preset asks for no load sweep
    note = run_.dashboard
    assert note is not None and note.error is None and note.plots
    assert shown["published"] == [note]
    assert run_.budget is None

    # What was said: the study first, then the confirmation's plan and its stop; the estimate
    # went to the progress lines, before the first trial.
    assert said[0] == f"study fake-cpu on {url}"
    assert any(line.startswith("confirmation: the top 1 candidates") for line in said), said
    assert any(line.startswith("confirmation: stopped after 1 round") for line in said), said
    progress = [line.split("] ", 1)[1] for line in lines.getvalue().splitlines()]
    assert progress[0].startswith("workload: replay"), progress
    assert progress[1].startswith("estimate: "), progress
    assert progress[2].startswith("trial 0 (baseline) started"), progress

    # The storage: two search trials, the floor start and the candidate's round, all complete.
    study = optuna.load_study(study_name="fake-cpu", storage=url)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4
