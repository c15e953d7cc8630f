"""The plain progress lines: what each says, from the trial's stored attributes."""

from __future__ import annotations

import io
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from tests.conftest import BF16_CPU
from tuner.attrs import Role, TrialAttr
from tuner.study.preflight.dtype import resolve_dtype
from tuner.study.search.driver import request_factory
from tuner.study.search.estimate import (
    estimate_line,
    eta_line,
    minutes,
    planned_runs,
    run_estimate_s,
)
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.search.progress import (
    ProgressLines,
    clock,
    finished_line,
    heartbeat_line,
    interrupted_line,
    ready_line,
    started_line,
)
from tuner.study.search.roles import role_of, search_reruns
from tuner.study.space import load_preset
from tuner.testing.scripted_backend import ScriptedBackend, ScriptedRun


def _trial(state: TrialState, value: float | None = None, **attrs: object) -> FrozenTrial:
    return optuna.trial.create_trial(
        state=state,
        value=value,
        params={"method": "none"},
        distributions={"method": CategoricalDistribution(["none", "ngram"])},
        user_attrs={str(k): v for k, v in attrs.items()},
    )


def test_clock_and_minutes_read_like_a_person_writes_them() -> None:
    assert clock(0) == "0:00:00" and clock(3725.9) == "1:02:05"
    assert minutes(44.6) == "45 s"
    assert minutes(1000) == "about 17 min"
    assert minutes(4800) == "about 1 h 20 min"


def test_the_cpu_estimate_is_the_preset_tasks_at_the_measured_pace() -> None:
    cpu = load_preset(model="smollm2-135m", gpu="cpu")  # 12 + 1 tasks, 2 agents
    # As resolved on a CPU with bf16 (the grid's figures), whatever CPU runs the test.
    preset, _ = resolve_dtype(cpu, cpuinfo=BF16_CPU)
    # 42.1 s start + 13 tasks x 12.2 agent-s / 2 agents + 46.9 s after: 168.3 s, the measured
    # median run of benchmarks/data/grid-smollm2-135m-cpu.json.
    assert abs(run_estimate_s(preset) - 168.3) < 0.1
    bigger = preset.model_copy(
        update={"workload": preset.workload.model_copy(update={"tasks": 25})}
    )
    assert run_estimate_s(bigger) > run_estimate_s(preset) + 70
    line = estimate_line(preset, 6, 4)
    assert line.startswith(
        "estimate: about 28 min for 10 server runs (6 trials + up to 4 confirmation runs"
    )
    assert "about 168 s a run (13 tasks with 2 agents" in line
    assert "an estimate from the preset" in line
    assert "for 4 server runs (up to 4 confirmation runs)" in estimate_line(preset, 0, 4)
    # The baseline's re-runs during the search are server runs too.
    rerun = estimate_line(preset, 20, 5, reruns=3)
    assert "for 28 server runs (20 trials + 3 baseline re-runs + up to 5 confirmation" in rerun


@pytest.mark.parametrize("n_trials", [1, 2, 6, 7, 11, 12, 20])
def test_the_estimate_counts_the_baseline_re_runs_the_search_makes(n_trials: int) -> None:
    # The loop itself, on the scripted backend, decides when to re-run the baseline.
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    study = optuna.create_study(direction="maximize")
    backend = ScriptedBackend(lambda p: ScriptedRun(), n_slots=1)
    StudyLoop(
        study,
        preset,
        backend,
        request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent")),
        LoopSettings(n_trials=n_trials, seed=0, baseline_every=5),
    ).run()
    ran = sum(1 for t in study.get_trials() if role_of(t) == Role.BASELINE_RERUN)
    assert search_reruns(n_trials, 5) == ran


def test_eta_is_runs_left_at_the_measured_mean() -> None:
    assert eta_line(4, 1, [100.0, 140.0]) == (
        "ETA: about 8 min left (4 server runs to go at 120 s a run, measured over 2 server "
        "runs of this command)"
    )
    assert eta_line(4, 2, [120.0]).startswith("ETA: about 4 min left")
    assert eta_line(0, 1, [120.0]) == "ETA: no server run left (measured 120 s a run)"


def test_started_and_ready_name_the_trial_its_role_and_server() -> None:
    assert started_line(0, {TrialAttr.ROLE: "baseline"}, "none kv 2.0GB seqs 8") == (
        "trial 0 (baseline) started: none kv 2.0GB seqs 8"
    )
    confirm = {TrialAttr.ROLE: "confirm", TrialAttr.CONFIRM_OF: 3, TrialAttr.CONFIRM_ROUND: 1}
    assert started_line(7, confirm, "ngram d2").startswith(
        "trial 7 (confirmation of #3, round 2) started"
    )
    assert started_line(2, {TrialAttr.ROLE: "candidate"}, "x") == "trial 2 started: x"
    assert ready_line(2, 86784, 41.93) == (
        "trial 2 server ready: 86,784 KV cache tokens, started in 41.9 s"
    )
    assert ready_line(2, None, None) == "trial 2 server ready: KV cache size not reported"


def test_finished_lines_say_the_outcome_in_the_modes_words() -> None:
    scored = _trial(
        TrialState.COMPLETE, 538.4,
        **{TrialAttr.TASKS_PER_HOUR: 538.4, TrialAttr.TASKS_PER_HOUR_LOW: 451.2,
           TrialAttr.TASKS_PER_HOUR_HIGH: 640.0, TrialAttr.TIMING: {"worker_wall_s": 168.2}},
    )  # fmt: skip
    assert finished_line(scored, "replay") == (
        f"trial {scored.number} scored: 538 completed tasks/h [451, 640], run 168 s"
    )
    assert "538 successful tasks/h" in finished_line(scored, "live")
    pruned = _trial(
        TrialState.PRUNED, None,
        **{TrialAttr.TASKS_PER_HOUR: 210.0, TrialAttr.PRUNED_AT_TASKS: 5},
    )  # fmt: skip
    assert finished_line(pruned, "replay", 12).endswith(
        "pruned after 5 of 12 tasks: 210 completed tasks/h so far, clearly below the "
        "baseline's pace at the same point"
    )
    infeasible = _trial(
        TrialState.COMPLETE, 0.0,
        **{TrialAttr.INFEASIBLE: True,
           TrialAttr.FAILURE_REASON: "KV cache too small for max_model_len\nsecond line"},
    )  # fmt: skip
    assert finished_line(infeasible, "replay").endswith(
        "infeasible: KV cache too small for max_model_len"
    )
    failed = _trial(
        TrialState.FAIL, None,
        **{TrialAttr.FAILURE_KIND: "worker_crashed", TrialAttr.FAILURE_REASON: "the worker died"},
    )  # fmt: skip
    assert finished_line(failed, "live").endswith("failed (worker_crashed): the worker died")


def test_finished_lines_say_which_screening_rung_a_trial_reached() -> None:
    screened = _trial(
        TrialState.PRUNED, None,
        **{TrialAttr.PRUNED_AT_TASKS: 3,
           TrialAttr.SCREENED_OUT_AT: {"rung": 1, "tasks": 3, "optimistic_tasks_per_hour": 912.4,
                                       "best_tasks_per_hour": 1433.0}},
    )  # fmt: skip
    assert finished_line(screened, "replay", 12).endswith(
        "screened out at rung 1 after 3 of 12 tasks: at most 912 completed tasks/h against the "
        "best trial's 1,433 on the same tasks"
    )
    passed = _trial(
        TrialState.COMPLETE, 1500.0, **{TrialAttr.TASKS_PER_HOUR: 1500.0, TrialAttr.RUNG: 2}
    )
    assert finished_line(passed, "replay").endswith(
        "scored: 1,500 completed tasks/h, passed screening rung 2"
    )


def test_lines_are_stamped_flushed_and_the_eta_counts_later_stages() -> None:
    now = [100.0]
    out = io.StringIO()
    lines = ProgressLines(stream=out, now=lambda: now[0], later_runs=4)
    lines.eta(5, 1)  # nothing measured yet: no line
    assert out.getvalue() == ""
    done = _trial(TrialState.COMPLETE, 500.0, **{TrialAttr.TASKS_PER_HOUR: 500.0})
    lines.started(done.number, {TrialAttr.ROLE: "baseline"}, "none")
    now[0] = 220.0
    lines.finished(done, "replay", 12, counted=True)
    lines.eta(5, 1)
    assert out.getvalue().splitlines() == [
        f"[0:00:00] trial {done.number} (baseline) started: none",
        f"[0:02:00] trial {done.number} scored: 500 completed tasks/h",
        "[0:02:00] ETA: about 18 min left (9 server runs to go at 120 s a run, measured over "
        "1 server run of this command)",
    ]


def test_a_running_trial_says_its_phase_once_an_interval_passed_without_a_line() -> None:
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines(stream=out, now=lambda: now[0], interval_s=60.0)
    lines.started(3, {}, "ngram d1 seqs 4")
    for t, state in (
        (30.0, "server starting: vLLM says: loading weights"),
        (59.5, "server starting: vLLM says: compiling"),  # not yet an interval: quiet
        (61.0, "server starting: vLLM says: compiling"),
        (90.0, "scoring: 0 of 12 tasks done, 2 agents, 0 prompt tok/s and 0 gen tok/s so far"),
        (150.0, "scoring: 5 of 12 tasks done, 2 agents, 1,234 prompt tok/s and 41 gen tok/s"),
    ):
        now[0] = t
        lines.heartbeat(3, state)
    assert out.getvalue().splitlines()[1:] == [
        "[0:01:01] trial 3 server starting: 61 s, vLLM says: compiling",
        # The seconds are the phase's: the scored window opened at 90 s.
        "[0:02:30] trial 3 scoring: 60 s, 5 of 12 tasks done, 2 agents, 1,234 prompt tok/s and "
        "41 gen tok/s",
    ]


def test_any_line_of_a_trial_restarts_its_interval() -> None:
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines(stream=out, now=lambda: now[0], interval_s=10.0)
    lines.started(0, {}, "none")
    now[0] = 8.0
    lines.ready(0, 1000, 8.0)
    now[0] = 17.0
    lines.heartbeat(0, "workload")  # 9 s after "ready": quiet
    now[0] = 18.0
    lines.heartbeat(0, "correctness probe")
    assert out.getvalue().splitlines()[-1] == "[0:00:18] trial 0 correctness probe: 0 s"
    assert heartbeat_line(1, "starting", 5) == "trial 1 server starting: 5 s"


def test_the_interval_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_PROGRESS_INTERVAL_S", "2.5")
    assert ProgressLines(stream=io.StringIO()).interval_s == 2.5
    monkeypatch.delenv("TUNER_PROGRESS_INTERVAL_S")
    assert ProgressLines(stream=io.StringIO()).interval_s == 60.0


def test_the_interrupt_line_names_what_stops_and_the_command_that_resumes() -> None:
    resume = "tuner optimize --model smollm2-135m --gpu cpu --n-trials 6"
    assert interrupted_line([(2, {TrialAttr.ROLE: "candidate"}, "ngram d1 seqs 4")], resume) == (
        "interrupted: trial 2 (ngram d1 seqs 4) stops and goes back to the queue; resume with: "
        "tuner optimize --model smollm2-135m --gpu cpu --n-trials 6 (Ctrl-C again quits at once)"
    )
    two = [(0, {TrialAttr.ROLE: "baseline"}, "none"), (1, {}, "ngram d1")]
    assert interrupted_line(two, "tuner confirm").startswith(
        "interrupted: trial 0 (baseline) (none) and trial 1 (ngram d1) stop and go back to the "
        "queue; resume with: tuner confirm"
    )
    assert interrupted_line([], "tuner confirm").startswith("interrupted: no trial was running;")


@pytest.mark.parametrize(("n_trials", "k", "rounds"), [(2, 2, 10), (5, 1, 2), (6, 2, 3), (3, 2, 1)])
def test_the_estimate_counts_the_confirmation_runs_the_stage_queues(
    n_trials: int, k: int, rounds: int
) -> None:
    # A new study of n_trials: the baseline and n_trials - 1 candidates. The stage queues its
    # rounds with `queue_rounds` (the floor start is the baseline's round 0); at the cap the
    # estimate's "up to" is exactly what it queues.
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from tuner.study.stages.confirm_rounds import queue_rounds

    study = optuna.create_study(direction="maximize")
    for n in range(n_trials):
        role = Role.BASELINE if n == 0 else Role.CANDIDATE
        study.add_trial(
            create_trial(
                params={"x": float(n)},
                distributions={"x": FloatDistribution(0, 100)},
                value=100.0 + n,
                user_attrs={TrialAttr.ROLE: str(role)},
            )
        )
    trials = study.get_trials()
    queued = queue_rounds(study, [trials[0], *trials[1:][:k]], rounds)
    _, planned = planned_runs(
        n_trials, k=k, rounds=rounds, confirm=True, baseline_every=0, candidates=n_trials - 1
    )
    assert planned == queued
    # --confirm 0: the floor start alone.
    assert planned_runs(n_trials, k=k, rounds=rounds, confirm=False, baseline_every=0)[1] == 1
    # A study with its baseline only has nothing to confirm.
    assert planned_runs(1, k=k, rounds=rounds, confirm=True, baseline_every=0, candidates=0)[1] == 0


def test_a_queued_stage_uses_up_the_planned_runs_and_says_up_to() -> None:
    # After the search, the confirmation plans 4 runs at most. The floor start is queued
    # alone: when it is done, 3 may follow (a sequential stage may stop sooner), not none.
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines(stream=out, now=lambda: now[0], later_runs=4)
    lines.queued_stage = True
    floor = _trial(TrialState.COMPLETE, 500.0, **{TrialAttr.TASKS_PER_HOUR: 500.0})
    lines.started(floor.number, {TrialAttr.ROLE: "confirm"}, "none")
    now[0] = 100.0
    lines.finished(floor, "replay", 12, counted=True)
    lines.eta(0, 1)
    assert out.getvalue().splitlines()[-1] == (
        "[0:01:40] ETA: at most about 5 min left (up to 3 server runs to go at 100 s a run, "
        "measured over 1 server run of this command)"
    )
    # Queued runs beyond what was planned (a baseline round run again) are counted as queued.
    lines.eta(5, 1)
    assert "ETA: about 8 min left (5 server runs to go" in out.getvalue().splitlines()[-1]
    # A re-queued crash uses nothing up.
    lines.started(floor.number, {TrialAttr.ROLE: "confirm"}, "none")
    lines.finished(floor, "replay", 12, counted=False)
    assert lines.later_runs == 3
