"""The `TrialBackend` contract, run against every backend (as Optuna runs one storage suite
against every storage).

`tuner.study.trial.backend` states what `tuner.study.search.loop.StudyLoop` relies on from
whatever runs its trials; each test below states one clause of it and runs against each
backend: `ScriptedBackend` (tuner.testing), `SizingBackend` wrapping it (what the driver wraps
its backend in), the recorded grid's replay (benchmarks/_grid_replay.py), and `RayBackend` with
its workers starting the fake vLLM (`tuner.testing.fake_vllm`, a named fake) on local Ray with
two fake GPUs, bare and wrapped in `SizingBackend` as `tuner optimize` runs it
(marked `ray` and `extended`: out of CI).
A clause that cannot apply to a backend is skipped in the parametrization with its reason.

The tests drive a backend as the loop does: `submit` on idle slots, then `wait(poll_s)` and
`progress()` in turn. Each backend's `Harness` says only how to make its trials (one that runs
in full, one slow enough to be stopped), how long its trials may take, and how to see what it
left running; the expectations come from the contract, never from a backend's code.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.integration.conftest import fake_preset, fake_vllm_ray
from tuner.server import ServerSpec
from tuner.study.preflight.plan import WorkloadSizing
from tuner.study.search.loop import PLACEMENT_WAIT_S
from tuner.study.search.sizing_backend import SizingBackend
from tuner.study.space import Preset
from tuner.study.trial.backend import Finished, TrialBackend
from tuner.study.trial.request import ThroughputPlan, TrialRequest
from tuner.testing.scripted_backend import ScriptedBackend, ScriptedRun
from tuner.workload import WorkloadSettings

# Issue 48: an interrupted study stops within 10 s, whatever its trials do (the backend's
# share: `tuner.study.trial.workers.ABORT_WAIT_S`, 6 s).
ABORT_WITHIN_S = 10.0


@dataclass
class Harness:
    """One backend under test and the trials it is asked to run.

    Attributes:
        backend: The backend, fresh, with `SLOTS` slots.
        full: A trial (by number) that runs its workload in full.
        slow: A trial whose scored tasks take long enough to stop it between two of them.
        poll_s: What the loop would pass to `wait`.
        patience_s: Backend seconds within which any trial of `full` or `slow` comes back.
        kill_worker: Submits a trial on a slot and makes its worker die mid-trial (None: the
            backend has no worker that can die).
        left_running: What of the backend's trials still runs (after `close`).
    """

    backend: Any
    full: Callable[[int], TrialRequest]
    slow: Callable[[int], TrialRequest]
    poll_s: float
    patience_s: float
    kill_worker: Callable[[Any, int], None] | None
    left_running: Callable[[], list[str]]


SLOTS = 2


# ---- the backends --------------------------------------------------------------------------


def _scripted_request(number: int, params: dict[str, Any], tmp: Path) -> TrialRequest:
    return TrialRequest(
        study_name="contract",
        trial_number=number,
        params=params,
        spec=ServerSpec(model="scripted"),
        workload=WorkloadSettings(tasks=8, agents=2),
        cache_dir=str(tmp),
    )


def _scripted(tmp: Path) -> Harness:
    def script(params: dict[str, Any]) -> ScriptedRun:
        return ScriptedRun(tasks_per_hour=120.0, startup_s=30.0, crash=params.get("crash"))

    backend = ScriptedBackend(script, n_slots=SLOTS)

    def kill_worker(backend: Any, slot: int) -> None:
        # A scripted worker dies by its script, from the start.
        backend.submit(slot, _scripted_request(90 + slot, {"crash": "scripted death"}, tmp))

    def left() -> list[str]:
        return [f"trial {n}" for n in backend.progress()]

    def request(number: int) -> TrialRequest:
        return _scripted_request(number, {}, tmp)

    # 8 tasks at 120 tasks/h after a 30 s start: 270 s of the simulated clock a trial.
    return Harness(backend, request, request, 1.0, 3600.0, kill_worker, left)


def _sized(inner: Harness) -> Harness:
    study = optuna.create_study(direction="maximize")
    sizing = WorkloadSizing(workload=inner.full(0).workload)
    sized = SizingBackend(inner.backend, study, sizing, say=lambda _line: None)
    return Harness(
        sized,
        inner.full,
        inner.slow,
        inner.poll_s,
        inner.patience_s,
        inner.kill_worker,
        inner.left_running,
    )


def _grid_replay(tmp: Path) -> Harness:
    from benchmarks._grid_replay import DATA, GridReplayBackend, GridTable

    table = GridTable.load(DATA)
    preset = table.preset
    params = preset.baseline_params()  # recorded as started, with its scored tasks

    def request(number: int) -> TrialRequest:
        return TrialRequest(
            study_name="contract",
            trial_number=number,
            params=params,
            spec=preset.server_spec(params, model_path="recorded"),
            workload=preset.workload,
            cache_dir=str(tmp),
        )

    backend = GridReplayBackend(table, SLOTS, random.Random(0))

    def left() -> list[str]:
        return [f"trial {n}" for n in backend.progress()]

    return Harness(backend, request, request, 1.0, 3600.0, None, left)


def _fake_preset() -> Preset:
    data = fake_preset(
        {"FAKE_VLLM_STARTUP_S": "0.5"},
        tasks=2,
        tool_latency_s=0.0,
        gpu={"name": "fake2", "memory_gib": 24, "count": SLOTS},
    )
    return Preset.model_validate(data)


def _ray(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    from tuner.server.reaper import group_members, live_records
    from tuner.study.trial import workers
    from tuner.study.trial.workers import RayBackend

    preset = _fake_preset()
    params = preset.baseline_params()
    cache = tmp / "cache"
    no_benchmark = ThroughputPlan(streams=())

    def request(number: int, tasks: int, env: dict[str, str]) -> TrialRequest:
        spec = preset.server_spec(params, model_path="fake/model")
        return TrialRequest(
            study_name="contract",
            trial_number=number,
            params=params,
            spec=spec.replace(env={**spec.env, **env}),
            workload=preset.workload.model_copy(update={"tasks": tasks}),
            cache_dir=str(cache),
            throughput=no_benchmark,
        )

    def servers() -> list[Any]:
        return live_records(cache / "run")

    def kill_worker(backend: Any, slot: int) -> None:
        # The Ray worker process dies as the OOM killer would kill it: SIGKILL, mid-trial.
        backend.submit(slot, request(90 + slot, 8, {"FAKE_VLLM_TOKEN_DELAY_S": "0.2"}))
        deadline = time.monotonic() + 60
        while not servers() and time.monotonic() < deadline:
            time.sleep(0.1)
        (server,) = servers()
        os.kill(server.owner_pid, signal.SIGKILL)

    def left() -> list[str]:
        # A server group this test's trials started, still alive within the grace a killed
        # worker's supervisor takes to stop it.
        deadline = time.monotonic() + ABORT_WITHIN_S
        while True:
            alive = [
                f"server group {s.pgid}: {pid}"
                for s in servers()
                for pid in group_members(s.pgid, since_ticks=s.start_ticks)
            ]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)

    # The GCS's judgement of a dead worker's node: its node here never dies, so the wait for
    # it (30 s a crash) is cut to what the test can afford.
    monkeypatch.setattr(workers, "NODE_DEATH_WAIT_S", 2.0)
    backend = RayBackend(slots=SLOTS, gpus_per_slot=1)
    return Harness(
        backend,
        lambda n: request(n, 2, {}),
        # About 1 s a scored task (0.05 s a word, a few turns of tens of words).
        lambda n: request(n, 8, {"FAKE_VLLM_TOKEN_DELAY_S": "0.05"}),
        0.2,
        120.0,
        kill_worker,
        left,
    )


@pytest.fixture(scope="module")
def fake_ray() -> Iterator[None]:
    """Local Ray with two fake GPUs; its workers start the fake server as `vllm`."""
    with fake_vllm_ray(num_gpus=SLOTS):
        yield


BACKENDS = ("scripted", "sized scripted", "grid replay", "ray", "sized ray")
RAY = {"ray", "sized ray"}


def backends(**skips: str) -> list[Any]:
    """Every backend, as parameters; `skips`: a backend's reason this clause does not apply
    to it (keyed by its name with "_" for " ")."""
    out = []
    for name in BACKENDS:
        marks: list[Any] = [pytest.mark.ray, pytest.mark.extended] if name in RAY else []
        reason = skips.get(name.replace(" ", "_"))
        if reason is not None:
            marks.append(pytest.mark.skip(reason=reason))
        out.append(pytest.param(name, marks=marks, id=name.replace(" ", "-")))
    return out


@pytest.fixture
def harness(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    """The backend named by the test's parameter, closed afterwards."""
    name = request.param
    if name in RAY:
        request.getfixturevalue("fake_ray")
    made = {
        "scripted": lambda: _scripted(tmp_path),
        "sized scripted": lambda: _sized(_scripted(tmp_path)),
        "grid replay": lambda: _grid_replay(tmp_path),
        "ray": lambda: _ray(tmp_path, monkeypatch),
        "sized ray": lambda: _sized(_ray(tmp_path, monkeypatch)),
    }[name]()
    try:
        yield made
    finally:
        made.backend.close()


# ---- driving a backend as the loop does ----------------------------------------------------


@dataclass
class Run:
    """What came back while the test waited, and when (backend clock)."""

    back: list[tuple[float, Finished]] = field(default_factory=list)

    def numbers(self) -> list[int]:
        return [f.trial_number for _, f in self.back]


def wait_until(
    h: Harness,
    done: Callable[[Run], bool],
    run: Run | None = None,
    *,
    within_s: float | None = None,
    each: Callable[[], None] | None = None,
) -> Run:
    """Call `wait(poll_s)` (then `progress()`, as the loop does) until `done(run)`; fail if
    that takes more than `within_s` (default `patience_s`) of the backend's clock, or if the
    clock goes back."""
    backend: TrialBackend = h.backend
    run = run or Run()
    start = last = backend.now()
    limit = h.patience_s if within_s is None else within_s
    while not done(run):
        for f in backend.wait(h.poll_s):
            run.back.append((backend.now(), f))
        now = backend.now()
        assert now >= last, f"the clock went back: {last} -> {now}"
        last = now
        running = backend.progress()
        assert not set(running) & set(run.numbers()), "a trial that came back still runs"
        if each is not None:
            each()
        assert now - start <= limit, f"not done within {limit:g} s: {run.back}"
    return run


def all_back(numbers: set[int]) -> Callable[[Run], bool]:
    return lambda run: numbers <= set(run.numbers())


def tasks_done(h: Harness, number: int, at_least: int) -> Callable[[Run], bool]:
    def done(run: Run) -> bool:
        assert number not in run.numbers(), "the slow trial finished before it was stopped"
        p = h.backend.progress().get(number)
        return p is not None and p.tasks_done >= at_least

    return done


# ---- the contract --------------------------------------------------------------------------


@pytest.mark.parametrize("harness", backends(), indirect=True)
def test_a_fresh_backend_offers_every_slot_and_submit_returns_at_once(harness: Harness) -> None:
    backend = harness.backend
    # 1. `slots` trials may run at once, and the loop keeps each ready slot busy.
    assert backend.slots == SLOTS
    assert all(backend.ready(slot) for slot in range(backend.slots))
    # 2. submit starts the trial and returns at once: on the backend's clock and on the wall.
    before, wall = backend.now(), time.monotonic()
    for slot in range(backend.slots):
        backend.submit(slot, harness.full(slot))
    assert backend.now() - before < 1.0
    assert time.monotonic() - wall < 5.0
    # 4. progress() covers every running trial, by its number.
    assert set(backend.progress()) == set(range(backend.slots))


@pytest.mark.parametrize("harness", backends(), indirect=True)
def test_every_submitted_trial_comes_back_once_with_its_number_and_result(
    harness: Harness,
) -> None:
    backend = harness.backend
    submitted = {}
    for slot in range(backend.slots):
        submitted[slot] = backend.now()
        backend.submit(slot, harness.full(10 + slot))
    run = wait_until(harness, all_back({10, 11}))
    # 3. Each trial comes back once, on its slot, with its own result (the loop records it
    # under `trial_number`; a crash line is only for a worker that died).
    assert sorted(run.numbers()) == [10, 11]
    for at, f in run.back:
        assert f.slot == f.trial_number - 10
        assert f.crash is None and f.result is not None
        assert f.result.trial_number == f.trial_number
        assert not f.result.pruned and f.result.failure_kind is None
        assert f.result.workload is not None
        assert f.result.workload.tasks == harness.full(0).workload.tasks
        # 7. A trial takes time on the backend's clock (what the budget learns it costs).
        assert at > submitted[f.slot]
    # Nothing comes back twice, and nothing runs any more.
    assert backend.progress() == {}
    assert backend.wait(harness.poll_s) == []
    # 5. Asking a trial that came back to stop (the loop's `abandon` races one that finishes)
    # changes nothing, and the slots run the next trials in full.
    for number in (10, 11):
        backend.request_stop(number)
    assert backend.wait(harness.poll_s) == []
    backend.submit(0, harness.full(12))
    (again,) = [f for _, f in wait_until(harness, all_back({12})).back]
    assert again.result is not None and not again.result.pruned


@pytest.mark.parametrize("harness", backends(), indirect=True)
def test_wait_with_nothing_running_lets_its_timeout_pass(harness: Harness) -> None:
    # The loop waits so for a slot's replacement worker (`PLACEMENT_WAIT_S`) and for other
    # drivers' trials: a wait that returned at once, its clock still, would spin forever.
    backend = harness.backend
    before = backend.now()
    assert backend.wait(harness.poll_s) == []
    assert backend.now() - before >= harness.poll_s * 0.9


@pytest.mark.parametrize("harness", backends(), indirect=True)
def test_progress_reports_the_scored_tasks_of_a_running_trial(harness: Harness) -> None:
    # 4. What the pruner rule reads: tasks done of the total, successes and a rate, rising as
    # scored tasks finish, for the trial's number.
    backend = harness.backend
    backend.submit(1, harness.slow(20))
    seen: list[tuple[int, int, int]] = []

    def look() -> None:
        p = backend.progress().get(20)
        if p is not None:
            seen.append((p.tasks_done, p.successes, p.tasks_total))

    wait_until(harness, tasks_done(harness, 20, 2), each=look)
    p = backend.progress()[20]
    assert p.tasks_per_hour is not None and p.tasks_per_hour > 0
    assert p.elapsed_s > 0
    assert p.tasks_total == harness.slow(0).workload.tasks
    assert all(0 <= s <= d <= t for d, s, t in seen), seen
    done = [d for d, _, _ in seen]
    assert done == sorted(done), "tasks done went back"


@pytest.mark.parametrize("harness", backends(), indirect=True)
def test_a_stopped_trial_comes_back_pruned_with_the_tasks_it_finished(harness: Harness) -> None:
    # 5. request_stop: the trial stops at its next task boundary and comes back through wait
    # with `pruned` set and its finished tasks measured.
    backend = harness.backend
    backend.submit(0, harness.slow(30))
    wait_until(harness, tasks_done(harness, 30, 1))
    done = backend.progress()[30].tasks_done
    backend.request_stop(30)
    (f,) = [f for _, f in wait_until(harness, all_back({30})).back]
    assert f.crash is None and f.result is not None
    assert f.result.pruned
    assert f.result.workload is not None
    total = harness.slow(0).workload.tasks
    assert done <= f.result.workload.tasks < total


@pytest.mark.parametrize(
    "harness",
    backends(grid_replay="the replay has no worker to die: a recorded failure is a result"),
    indirect=True,
)
def test_a_dead_worker_comes_back_as_one_line_and_its_slot_runs_again(harness: Harness) -> None:
    # 3. A worker that died returns its trial as a one-line `crash`, no result (the loop
    # re-queues it); 6. its slot is ready again once a new worker is placed, which the loop
    # waits for (`PLACEMENT_WAIT_S`), and runs the next trial.
    backend = harness.backend
    assert harness.kill_worker is not None
    harness.kill_worker(backend, 1)
    (f,) = [f for _, f in wait_until(harness, lambda run: bool(run.back)).back]
    assert f.slot == 1 and f.result is None
    assert f.crash and "\n" not in f.crash
    assert not f.node_lost  # the worker died, not its node
    wait_until(harness, lambda _run: backend.ready(1), within_s=PLACEMENT_WAIT_S)
    backend.submit(1, harness.full(40))
    (again,) = [f for _, f in wait_until(harness, all_back({40})).back]
    assert again.result is not None and again.result.workload is not None


NO_ABORT = "no `abort` (optional): its trials have no server to stop at once"


@pytest.mark.parametrize(
    "harness",
    backends(
        scripted=NO_ABORT,
        grid_replay=NO_ABORT,
        sized_scripted="SizingBackend's abort is the wrapped backend's: ScriptedBackend has none",
    ),
    indirect=True,
)
def test_abort_brings_every_running_trial_back_within_seconds_with_nothing_measured(
    harness: Harness,
) -> None:
    # 9. abort: every running trial stops now, in whatever phase (here one scoring, one
    # starting), comes back within seconds, and nothing it measured is to be stored.
    backend = harness.backend
    backend.submit(0, harness.slow(50))
    wait_until(harness, tasks_done(harness, 50, 1))
    backend.submit(1, harness.slow(51))
    start = backend.now()
    backend.abort()
    run = wait_until(harness, all_back({50, 51}), within_s=ABORT_WITHIN_S)
    assert sorted(run.numbers()) == [50, 51]
    assert backend.wait(harness.poll_s) == []
    for _, f in run.back:
        measured = f.result is not None and (
            f.result.workload is not None or f.result.calibration is not None
        )
        assert not measured, f
        assert f.result is None or f.result.failure_kind == "interrupted", f
    assert max(at for at, _ in run.back) - start <= ABORT_WITHIN_S
    assert harness.left_running() == []


@pytest.mark.parametrize("harness", backends(), indirect=True)
def test_close_leaves_no_trial_running(harness: Harness) -> None:
    # 8. close stops everything: no server outlives it, and no trial comes back after it.
    backend = harness.backend
    backend.submit(0, harness.slow(60))
    wait_until(harness, tasks_done(harness, 60, 1))
    backend.submit(1, harness.slow(61))
    backend.close()
    assert harness.left_running() == []
    assert backend.wait(harness.poll_s) == []
