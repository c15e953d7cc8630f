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
from tuner.metrics import BetweenRunNoise
from tuner.study.search import budget_plan
from tuner.study.search.budget import Budget
from tuner.study.search.budget_plan import search_share, split_runs
from tuner.study.search.driver import request_factory
from tuner.study.search.estimate import CPU_COST, CPU_FP32_COST, planned_run_s, preset_cost
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
    monkeypatch.setattr(budget_plan, "BUDGET_SEARCH_SHARE", {0.1: 0.2, 0.25: 0.5, 0.5: 0.8})
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


def _dtype(preset: Preset, dtype: str) -> Preset:
    return preset.model_copy(update={"model": preset.model.model_copy(update={"dtype": dtype})})


def test_a_cpu_without_bf16_plans_from_the_float32_record_not_the_bf16_grid() -> None:
    cpu = load_preset(model="smollm2-135m", gpu="cpu")  # dtype: by-cpu
    assert cpu.model.dtype == "by-cpu"
    zen3, zen4 = "flags\t: fpu sse avx2\n", "flags\t: fpu sse avx2 avx512f avx512_bf16\n"
    assert preset_cost(cpu, zen3) == CPU_FP32_COST and preset_cost(cpu, zen4) == CPU_COST
    # A dtype the preset names is taken as named, whatever the CPU.
    assert preset_cost(_dtype(cpu, "float32"), zen4) == CPU_FP32_COST
    assert preset_cost(_dtype(cpu, "auto"), zen3) == CPU_COST
    # The README's main command, --budget 20m, on the Zen 3 of docs/first-run-zen3.md: its two
    # runs took 392 s and 360 s. The grid's bf16 figures said 168 s a run (6 runs); the float32
    # record: 144.5 s start + min(13 x 25.5 / 2 = 165.75, 120 x 13/12 + 45.5 = 175.5) + 66 s
    # after = 376.25 s, the two runs' mean.
    fp32, bf16 = _dtype(cpu, "float32"), _dtype(cpu, "auto")
    seconds, source = planned_run_s(fp32, window_s=120.0) or (0.0, "")
    assert abs(seconds - 376.25) < 0.01 and "docs/first-run-zen3.md" in source
    assert abs((planned_run_s(bf16, window_s=120.0) or (0.0, ""))[0] - 168.3) < 0.01
    # The bound still holds a window shorter than the float32 pace: 120 x 13/12 = 130 s <
    # 165.75; a 60 s window: 60 x 13/12 + 45.5 = 110.5 s of workload.
    short = (planned_run_s(fp32, window_s=60.0) or (0.0, ""))[0]
    assert abs(short - (144.5 + 110.5 + 66.0)) < 0.01
    # What 20 minutes buys there: the Zen 3 ran 2 trials; the plan now promises 3 runs at
    # most, not the 6 the bf16 figures promised.
    plans = {}
    for name, preset in (("fp32", fp32), ("bf16", bf16)):
        first = planned_run_s(preset, window_s=120.0)
        assert first is not None
        budget = Budget(1200, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=first[0])
        plans[name] = budget.plan()
    assert plans["fp32"] is not None and plans["bf16"] is not None
    assert plans["fp32"].runs <= 3 < plans["bf16"].runs


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
def test_the_search_stops_while_its_confirmation_still_fits(
    slower: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The estimate says 462 s a run (the scripted run at 100 tasks/h); at 2.5x it is slower,
    # which only the measured runs show: the revised plan and the guard keep the rounds' time.
    # The guard under a split that plans rounds at this budget (about 5% of the 270-config
    # grid, where the replay's table may give every run to the search).
    monkeypatch.setattr(budget_plan, "BUDGET_SEARCH_SHARE", {0.1: 0.6, 0.25: 0.7, 0.5: 0.7})
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

    from tuner.study.search.budget_plan import BUDGET_SEARCH_SHARE

    split = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
    data = json.loads((split / "sample-efficiency-split-smollm2-135m-cpu-large.json").read_text())
    chosen = {row["total"]: row["search_share"] for row in data["totals"].values()}
    assert dict(BUDGET_SEARCH_SHARE) == chosen


# ---- the power a confirmation buys (tuner.study.search.power) -------------------------------

# A hand-made table whose readings are worked out by hand below: levels x1, x2, x4; caps 2, 4,
# 6, 10; 100 studies a cell.
_HAND = {
    "fitted": {
        1: {1.0: (0.2, 0.6, 0.8, 0.9), 2.0: (0.0, 0.3, 0.5, 0.7), 4.0: (0.0, 0.1, 0.2, 0.3)},
        2: {1.0: (0.3, 0.7, 1.0, 1.0), 2.0: (0.1, 0.5, 0.85, 0.95), 4.0: (0.0, 0.2, 0.4, 0.5)},
    },
    "slow+walk": {
        1: {1.0: (0.1, 0.3, 0.4, 0.5), 2.0: (0.0, 0.2, 0.3, 0.4), 4.0: (0.0, 0.0, 0.1, 0.2)},
        2: {1.0: (0.2, 0.5, 0.7, 0.8), 2.0: (0.05, 0.25, 0.45, 0.6), 4.0: (0.0, 0.1, 0.2, 0.3)},
    },
}


@pytest.fixture
def hand_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.study.search import power

    monkeypatch.setattr(power, "CONFIRM_POWER", _HAND)
    monkeypatch.setattr(power, "LARGEST_K", 2)
    monkeypatch.setattr(power, "POWER_LEVELS", (1.0, 2.0, 4.0))
    monkeypatch.setattr(power, "POWER_CAPS", (2, 4, 6, 10))
    monkeypatch.setattr(power, "STUDIES", 100)
    monkeypatch.setattr(power, "X1_PAIRED_SD", 0.02)


@pytest.mark.usefixtures("hand_table")
def test_the_power_table_is_read_between_its_levels_and_caps() -> None:
    from tuner.study.search.power import power_at, rounds_for

    # On a cell: K=2, x2, cap 4.
    assert power_at(2, 2.0, 4).power == pytest.approx(0.5)
    # Halfway between caps 6 and 10 (8 rounds) at x1: (1.0 + 1.0) / 2; at x2: (0.85 + 0.95) / 2.
    assert power_at(2, 1.0, 8).power == pytest.approx(1.0)
    assert power_at(2, 2.0, 8).power == pytest.approx(0.9)
    # Halfway between x2 and x4 (x3), cap 4: (0.5 + 0.2) / 2.
    assert power_at(2, 3.0, 4).power == pytest.approx(0.35)
    # Both at once: x3, 5 rounds: x2 reads (0.5 + 0.85) / 2 = 0.675, x4 (0.2 + 0.4) / 2 = 0.3.
    assert power_at(2, 3.0, 5).power == pytest.approx((0.675 + 0.3) / 2)
    # Below x1 it reads x1; past the largest cap, the largest; past x4 it reads x4 as a bound.
    assert power_at(2, 0.5, 4).power == pytest.approx(0.7) and not power_at(2, 0.5, 4).beyond
    assert power_at(2, 1.0, 30).power == pytest.approx(1.0)
    far = power_at(2, 9.0, 10)
    assert far.power == pytest.approx(0.5) and far.beyond
    # One round is below the smallest cap: it reads cap 2's.
    assert power_at(1, 1.0, 1).power == pytest.approx(0.2)
    # 3 finalists read the 2's row; the slow table is its own.
    assert power_at(3, 2.0, 4).power == pytest.approx(0.5)
    assert power_at(2, 2.0, 4, noise="slow+walk").power == pytest.approx(0.25)
    # The interval is Wilson's over 100 studies: 50 of 100 gives 0.404-0.596.
    lo, hi = power_at(2, 2.0, 4).interval
    assert lo == pytest.approx(0.4038, abs=0.001) and hi == pytest.approx(0.5962, abs=0.001)
    # The fewest rounds that reach 80% at x2: 5 rounds read (0.5 + 0.85) / 2 = 0.675, 6 read
    # 0.85; at x4 none reaches it, past the table none is promised.
    assert rounds_for(2, 2.0, 0.8) == 6
    assert rounds_for(2, 1.0, 0.8) == 5  # (0.7 + 1.0) / 2 = 0.85 at 5 rounds, 0.7 at 4
    assert rounds_for(2, 4.0, 0.8) is None
    assert rounds_for(2, 4.5, 0.01) is None


def _noise(sd: float) -> BetweenRunNoise:
    return BetweenRunNoise(sd, 5, "hand-made")


@pytest.mark.usefixtures("hand_table")
def test_the_cheapest_plan_that_reaches_the_target_chooses_finalists_and_rounds() -> None:
    from tuner.study.search.power import best_within, plan_for

    # The fitted table at x1: 1 finalist reaches 80% at 6 rounds (12 runs: a round is the
    # baseline and the finalists); 2 finalists first at 5 rounds ((0.7 + 1.0) / 2 = 0.85, 15
    # runs). The cheaper is 1 finalist for 6 rounds.
    assert plan_for(1.0, 2, noise="fitted") == (1, 6)
    # At most 1 finalist: the same plan; under 12 runs none fits.
    assert plan_for(1.0, 1, noise="fitted") == (1, 6)
    assert plan_for(1.0, 2, 11, noise="fitted") is None
    # The slow table (the default) at x1: 1 finalist never reaches 80% (0.5 at most), 2 at 10.
    assert plan_for(1.0, 2) == (2, 10)
    assert plan_for(1.0, 1) is None
    # Past the table's noisiest level its power is a bound: no plan is promised.
    assert plan_for(4.5, 2, noise="fitted", target=0.01) is None
    # The most power 11 runs buy at x1, fitted: 1 finalist for 5 rounds reads (0.6 + 0.8) / 2
    # = 0.7; 2 for 3 rounds (0.3 + 0.7) / 2 = 0.5. Two runs buy one round of one finalist
    # (read at the smallest cap, 0.2), one run nothing.
    assert best_within(1.0, 2, 11, noise="fitted") == (1, 5)
    assert best_within(1.0, 2, 2, noise="fitted") == (1, 1)
    assert best_within(1.0, 2, 1, noise="fitted") == (0, 0)


@pytest.mark.usefixtures("hand_table")
def test_the_confirmation_line_says_what_the_budget_buys_and_its_power() -> None:
    clock = _Clock()
    # 95 s a run and the 5 s gap: 100 s a run; the end's 30 s kept free. The study's paired sd
    # 0.02 is x1 of the hand table's x1 (0.02), where the slow table reaches 80% only with
    # the top 2 for 10 rounds (30 runs).
    rich = Budget(30 + 3000, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=95.0)
    rich.clock, rich.start = clock, clock()
    # 3000 s buy 30 runs and the floor start that ran: 10 rounds of 3 reach 80%.
    choice = rich.confirm_choice(_noise(0.02))
    assert (choice.k, choice.rounds, choice.afford, choice.needed) == (2, 10, 10, 10)
    assert choice.plan80 == (2, 10)
    line = rich.confirm_line(choice)
    assert "top 2 and the baseline for up to 10 rounds, the fewest that reach 80% with 1 " in line
    assert "x1.0 the fitted, over 5 df" in line and "about 100% power for a true +10%" in line
    assert "80% with 1 start in 20 slow)" in line  # the slow table at x1, 10 rounds
    assert "needs" not in line

    poor = Budget(30 + 1100, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=95.0)
    poor.clock, poor.start = clock, clock()
    # 1100 s buy 11 runs and the floor: 12. The slow table's most power within 12 runs: the
    # top 2 for 4 rounds (0.5) over the top 1 for 6 (0.4). The fitted table reads 0.7 there
    # (Wilson 60-78% of 100).
    choice = poor.confirm_choice(_noise(0.02))
    assert (choice.k, choice.rounds, choice.needed, choice.plan80) == (2, 4, 10, (2, 10))
    line = poor.confirm_line(choice)
    assert "for up to 4 rounds; at this study's noise (x1.0 the fitted, over 5 df)" in line
    assert "about 70% power for a true +10% (simulated, 95% interval 60%-78%" in line
    assert "50% with 1 start in 20 slow" in line
    # 10 rounds of 3 are 30 runs, the floor start already run: 29 x 100 s, about 48 min.
    assert line.endswith("80% with 1 start in 20 slow needs the top 2 for 10 rounds, about 48 min")

    # At x2 no plan of the slow table reaches 80%: the most power 21 runs buy is the top 2 for
    # 7 rounds (0.45 + (0.6 - 0.45) / 4 = 0.4875) over the top 1 for 10 (0.4).
    mid = Budget(30 + 2000, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=95.0)
    mid.clock, mid.start = clock, clock()
    choice = mid.confirm_choice(_noise(0.04))
    assert (choice.k, choice.rounds, choice.needed, choice.plan80) == (2, 7, None, None)
    line = mid.confirm_line(choice)
    assert "49% with 1 start in 20 slow" in line
    assert line.endswith(
        "80% with 1 start in 20 slow is not reached within 10 rounds of up to 2 finalists at "
        "this noise"
    )
    # --confirm's K caps the finalists: with K 1 the most power is the top 1 for 10 rounds.
    one = Budget(30 + 2000, k=1, rounds=10, floor=True, baseline_every=0, estimate_s=95.0)
    one.clock, one.start = clock, clock()
    assert (one.confirm_choice(_noise(0.04)).k, one.confirm_choice(_noise(0.04)).rounds) == (1, 10)

    # Past the table's noisiest level the power is a bound and no plan is promised.
    richer = Budget(30 + 2900, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=95.0)
    richer.clock, richer.start = clock, clock()
    choice = richer.confirm_choice(_noise(0.2))
    assert choice.needed is None and choice.plan80 is None
    line = richer.confirm_line(choice)
    assert "x10.0 the fitted, over 5 df, past the table's x4" in line
    assert "at most" in line

    # Without the study's noise the cap is --confirm's, as before.
    plain = rich.confirm_choice(None)
    assert (plain.k, plain.rounds) == (2, 10) and plain.power is None
    assert "power" not in rich.confirm_line(plain)


@pytest.mark.usefixtures("hand_table")
def test_without_a_budget_the_confirmation_says_the_power_of_its_rounds() -> None:
    from tuner.study.stages.confirm_budget import fixed_power_line

    # --confirm 2,4 at x1 of the hand table: 70% (Wilson 60-78% of 100), 50% with slow
    # starts, where 80% needs the top 2 for 10 rounds.
    line = fixed_power_line(2, 4, _noise(0.02))
    assert line.startswith("confirmation: the top 2 and the baseline for up to 4 rounds")
    assert "(--confirm 2,4); at this study's noise (x1.0 the fitted, over 5 df)" in line
    assert "about 70% power for a true +10% (simulated, 95% interval 60%-78%" in line
    assert line.endswith(
        "80% with 1 start in 20 slow needs the top 2 for 10 rounds, --confirm 2,10"
    )
    # --confirm 2,10 at x1: exactly the rounds that reach it.
    assert "up to 10 rounds (--confirm 2,10), the fewest that reach 80%" in fixed_power_line(
        2, 10, _noise(0.02)
    )
    # At x2 nothing in the table reaches it.
    line = fixed_power_line(2, 10, _noise(0.04))
    assert "that is about 95% power" in line and "--confirm 2," not in line.split(";")[-1]
    assert line.endswith("is not reached within 10 rounds of up to 2 finalists at this noise")
    # Past the table's noisiest level: a bound, and no cap is promised to reach 80%.
    line = fixed_power_line(2, 10, _noise(0.2))
    assert "at most 50% power" in line
    assert line.endswith("is not reached within 10 rounds of up to 2 finalists at this noise")


def test_the_products_power_table_is_the_simulations() -> None:
    # The product's copy of benchmarks/data/decision-sim-power.json (it does not read
    # benchmarks/): a new table is copied, not hand-edited.
    import json

    from tuner.study.search import power

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "decision-sim-power.json"
    data = json.loads(path.read_text())
    assert data["x1_paired_sd"] == power.X1_PAIRED_SD
    assert data["studies"] == power.STUDIES
    assert tuple(data["levels"]) == power.POWER_LEVELS
    assert tuple(data["caps"]) == power.POWER_CAPS
    table: dict[str, dict[int, dict[float, tuple[float, ...]]]] = {}
    for noise, cells in data["tables"].items():
        for cell in cells:
            row = table.setdefault(noise, {}).setdefault(cell["k"], {})
            row.setdefault(cell["x"], ())
            row[cell["x"]] += (cell["power"]["rate"],)
    assert {n: {k: dict(r) for k, r in t.items()} for n, t in power.CONFIRM_POWER.items()} == table


def test_without_a_fixed_k_a_budget_may_confirm_four_finalists_at_a_noisy_box() -> None:
    # The shipped table at x4.25 (the recorded boxes): the cheapest plan that reaches 80% with
    # slow starts is the top 4 for 27 rounds (docs/decision-sim.md, the budget's section), which
    # only a budget whose K the user left open may take; with K 2 it runs the most power 2
    # finalists have (the table's largest cap) and says what 80% needs.
    clock = _Clock()
    noise = _noise(0.0216 * 4.25)
    wide = Budget(30 + 20000, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=95.0,
                  k_power=4)  # fmt: skip
    wide.clock, wide.start = clock, clock()
    choice = wide.confirm_choice(noise)
    assert (choice.k, choice.rounds) == (4, 27)
    fixed = Budget(30 + 20000, k=2, rounds=10, floor=True, baseline_every=0, estimate_s=95.0)
    fixed.clock, fixed.start = clock, clock()
    choice = fixed.confirm_choice(noise)
    assert (choice.k, choice.rounds, choice.plan80) == (2, 30, (4, 27))
    assert "needs the top 4 for 27 rounds" in fixed.confirm_line(choice)
    # Without the study's noise the plan is --confirm's K, whatever the power may take.
    assert wide.confirm_choice(None).k == 2
