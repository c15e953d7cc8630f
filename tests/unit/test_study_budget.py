"""`--budget`: its parsing, the plan that splits it, and the guards that keep a study inside it.

The expectations are properties a user can check (every planned run fits, a round is whole,
the caps hold, the search stops while the confirmation still fits), or numbers worked out by
hand in the comments, never the planner's own arithmetic run again.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.cli._checks import budget_seconds
from tuner.errors import ConfigError
from tuner.study.search import budget as budget_module
from tuner.study.search.budget import Budget, search_share, split_runs
from tuner.study.search.driver import request_factory
from tuner.study.search.estimate import planned_run_s
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.space import Preset, load_preset
from tuner.testing.scripted_backend import ScriptedBackend, ScriptedRun


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("20m", 1200), ("2h", 7200), ("1h30m", 5400), ("1h0m5s", 3605), (" 2H ", 7200)],
)
def test_a_budget_is_a_duration_with_units(text: str, seconds: float) -> None:
    assert budget_seconds(text) == seconds


@pytest.mark.parametrize("text", ["20", "abc", "", "1h30", "1.5h", "20 m", "m", "30m2h", "0m"])
def test_anything_else_is_one_line_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        budget_seconds(text)
    line = str(err.value)
    assert "--budget" in line and "20m" in line and "\n" not in line


@pytest.mark.parametrize("runs", range(1, 60))
@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_every_plan_fits_its_runs_and_wastes_less_than_a_round(runs: int, k: int) -> None:
    plan = split_runs(runs, share=0.4, k=k, rounds=10, floor=True, baseline_every=5)
    used = plan.trials + plan.reruns + plan.confirm_runs
    assert used <= runs
    assert plan.trials >= min(runs, 2) - (1 if runs == 3 else 0)  # a baseline and a candidate
    assert plan.k <= k and plan.rounds <= 10
    assert plan.k <= max(plan.trials - 1, 0)  # finalists the search will have
    if plan.k:
        assert plan.rounds >= 1 and plan.floor == 0  # the floor is round 1's baseline run
        # What is left unplanned would not buy one more trial (a re-run may come with it).
        assert runs - used <= 1
    # Once 2 rounds fit some K, no plan stops at 1 round (no verdict is looked at before 2).
    if k and runs >= 2 + 4:
        assert plan.rounds >= 2


def test_the_rounds_and_trials_that_a_budget_buys_by_hand() -> None:
    # 10 runs at 40%: 4 to the search, 6 to the confirmation = 2 rounds of 2 finalists and
    # the baseline; nothing left over.
    plan = split_runs(10, share=0.4, k=2, rounds=10, floor=True, baseline_every=5)
    assert (plan.trials, plan.reruns, plan.k, plan.rounds) == (4, 0, 2, 2)
    # 6 runs: 2 searched, 4 left: 2 finalists get 1 round (3 runs), 1 finalist gets 2 (4):
    # the first look needs 2 rounds, so 1 finalist.
    plan = split_runs(6, share=0.4, k=2, rounds=10, floor=True, baseline_every=5)
    assert (plan.trials, plan.k, plan.rounds) == (2, 1, 2)
    # --confirm 0: all but the floor start searches.
    plan = split_runs(8, share=0.4, k=0, rounds=0, floor=True, baseline_every=0)
    assert (plan.trials, plan.confirm_runs) == (7, 1)
    # Dummy weights: no floor start either.
    plan = split_runs(8, share=0.4, k=0, rounds=0, floor=False, baseline_every=0)
    assert (plan.trials, plan.confirm_runs) == (8, 0)
    # With a baseline re-run after every 5 candidates, 7 trials would take 8 runs and the
    # floor a ninth: 6 trials.
    plan = split_runs(8, share=0.4, k=0, rounds=0, floor=True, baseline_every=5)
    assert (plan.trials, plan.reruns) == (6, 0)


def test_a_capped_search_gives_its_runs_to_the_confirmation() -> None:
    free = split_runs(30, share=0.4, k=2, rounds=10, floor=True, baseline_every=5)
    capped = split_runs(30, share=0.4, k=2, rounds=10, floor=True, baseline_every=5, trials_cap=3)
    assert capped.trials == 3 < free.trials
    assert capped.rounds > free.rounds


def test_a_resumed_study_has_candidates_to_confirm_before_it_searches() -> None:
    # Two runs buy no finalist in a new study (the baseline and one candidate, no room); one
    # with 5 trials before has 4 candidates already.
    new = split_runs(4, share=0.0, k=2, rounds=10, floor=True, baseline_every=5)
    old = split_runs(4, share=0.0, k=2, rounds=10, floor=True, baseline_every=5, trials_before=5)
    assert old.k >= 1 and old.rounds >= 1
    assert new.trials >= 2


def test_the_split_is_read_from_the_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget_module, "BUDGET_SEARCH_SHARE", {0.1: 0.2, 0.25: 0.5, 0.5: 0.8})
    assert search_share(0.1) == pytest.approx(0.2)
    assert search_share(0.25) == pytest.approx(0.5)
    assert search_share(0.5) == pytest.approx(0.8)
    assert search_share(0.01) == pytest.approx(0.2) and search_share(3.0) == pytest.approx(0.8)
    assert 0.5 < search_share(0.4) < 0.8
    # More share, more trials: the planner's split is the table's.
    budget = Budget(600, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=10.0)
    small = budget.plan()
    budget.space_size = 100  # 600 s against a 100 x 15 s grid: 0.4, between 0.5 and 0.8
    large = budget.plan()
    assert small is not None and large is not None
    assert large.trials > small.trials


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_measured_run_replaces_the_estimate_and_the_gap_is_measured() -> None:
    clock = _Clock()
    budget = Budget(
        3600, k=2, rounds=10, floor=True, baseline_every=5, estimate_s=100.0, clock=clock
    )
    estimated = budget.plan()
    budget.run_started()
    clock.t += 300
    budget.run_finished(300, full=True, search=True)
    clock.t += 20
    budget.run_started()  # 20 s between the two runs
    assert budget.gaps == [20]
    revised = budget.plan()
    assert estimated is not None and revised is not None
    assert revised.runs < estimated.runs
    # A screened-out run is no measure of a whole one.
    clock.t += 50
    budget.run_finished(50, full=False, search=True)
    assert budget.full_runs == [300]


def test_the_guards_keep_the_confirmation_time() -> None:
    clock = _Clock()
    budget = Budget(1000, k=1, rounds=3, floor=True, baseline_every=0, estimate_s=95.0, clock=clock)
    # 1000 s, 30 s kept for the end, 100 s a run with the gap: 9 runs.
    assert budget.fits(9) and not budget.fits(10)
    assert budget.may_start_search(confirm_runs=8) and not budget.may_start_search(confirm_runs=9)
    clock.t += 500
    assert budget.fits(4) and not budget.fits(5)
    # What the time left buys: 4 runs and the floor start that ran = 2 rounds of 1 finalist.
    assert budget.confirm_plan() == (1, 2)


def test_a_gpu_preset_plans_only_from_its_own_model_s_recorded_runs() -> None:
    cpu = load_preset(model="smollm2-135m", gpu="cpu")
    assert planned_run_s(cpu, window_s=cpu.window_s) is not None
    gpu = Preset.model_validate(
        {
            **cpu.model_dump(exclude={"recorded_run"}),
            "model": cpu.model.model_dump(exclude={"dtype"}),
            "gpu": {"name": "h200", "memory_gib": 141},
        }
    )
    assert planned_run_s(gpu) is None  # not a tiny model's start
    run = {"startup_s": 280.0, "agent_s_per_task": 30.0, "after_s": 40.0, "source": "one H200"}
    recorded = Preset.model_validate({**gpu.model_dump(), "recorded_run": run})
    seconds, source = planned_run_s(recorded) or (0.0, "")
    assert seconds > 280 and "one H200" in source
    # No cost known: the plan waits for the first run, which the guard lets start.
    budget = Budget(7200, k=2, rounds=10, floor=True, baseline_every=5, estimate_s=None)
    assert budget.plan() is None and budget.may_start_search(0)
    assert "first run measures it" in budget.plan_line()


def _loop(budget: Budget, run_s_scale: float) -> tuple[StudyLoop, ScriptedBackend]:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    study = optuna.create_study(direction="maximize")
    # 12 tasks at `tph` tasks/h after a 30 s start: the run takes 30 + 12 x 3600 / tph s.
    tph = 100.0 / run_s_scale
    backend = ScriptedBackend(lambda p: ScriptedRun(tasks_per_hour=tph), n_slots=1)
    budget.clock = backend.now
    budget.start = backend.now()
    plan = budget.plan()
    loop = StudyLoop(
        study,
        preset,
        backend,
        request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent")),
        LoopSettings(n_trials=plan.trials if plan else 1, seed=0, budget=budget),
    )
    return loop, backend


@pytest.mark.parametrize("slower", [1.0, 2.5])
def test_the_search_stops_while_its_confirmation_still_fits(slower: float) -> None:
    # The estimate says 462 s a run (the scripted run at 100 tasks/h); at 2.5x it is slower,
    # which only the measured runs show: the revised plan and the guard keep the rounds' time.
    budget = Budget(
        4 * 3600, k=2, rounds=10, floor=True, baseline_every=5, estimate_s=462.0, space_size=None
    )
    loop, _backend = _loop(budget, slower)
    outcome = loop.run()
    plan = budget.plan()
    assert plan is not None and plan.k >= 1
    searched = budget.search_runs
    assert searched >= 2
    assert budget.fits(plan.confirm_runs)  # the rounds it planned still fit, measured
    assert outcome.target is not None
    assert outcome.budget_stopped or searched >= outcome.target


def test_the_search_share_is_the_replays_choice() -> None:
    # The split lives in one place in the product; the replay's file says what it should be.
    import json
    from pathlib import Path

    from tuner.study.search.budget import BUDGET_SEARCH_SHARE

    split = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
    data = json.loads((split / "sample-efficiency-split-smollm2-135m-cpu-large.json").read_text())
    chosen = {row["total"]: row["search_share"] for row in data["totals"].values()}
    assert dict(BUDGET_SEARCH_SHARE) == chosen
