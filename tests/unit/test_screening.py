"""Screening (multi-fidelity): a candidate plays a prefix and goes on only if it can still win.

The rule (`tuner.study.search.pruning.ScreenRule`) on hand-made progress, then through tuner's real
study loop on the recorded grid's replay (benchmarks/_grid_replay.py): screened-out trials
are PRUNED, cost what they ran, and say at which rung they stopped.
"""

from __future__ import annotations

import random
from pathlib import Path

import optuna
import pytest

from benchmarks._grid_replay import DATA, GridReplayBackend, GridTable
from tests.conftest import stub_cluster_join
from tuner.attrs import Role, TrialAttr
from tuner.study.search.driver import request_factory
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.search.pruning import PruneRule, RunningRate, ScreenRule, binomial_upper
from tuner.study.space import load_preset

RULE = ScreenRule(rungs=(1 / 4, 1 / 2), slack=0.20)
BEST = {1: 900.0, 3: 700.0, 6: 720.0, 12: 716.0}  # the best trial's tasks/h by finished tasks


def _at(done: int, successes: int, rate: float) -> RunningRate:
    # `successes` in the time that gives `rate` successes per hour.
    return RunningRate(done, 12, successes, successes * 3600.0 / rate)


def test_rungs_fall_on_task_counts_and_never_on_the_last_task() -> None:
    assert RULE.steps(12) == (3, 6)
    assert ScreenRule(rungs=(1 / 4, 1.0)).steps(12) == (3,)
    assert ScreenRule(rungs=(0.01,)).steps(12) == (1,)


def test_a_clear_loser_is_screened_at_the_first_rung_and_a_close_one_passes() -> None:
    loser = RULE.judge(_at(3, 3, 500.0), 2, BEST)  # 500 x 1.2 = 600 < 700
    assert loser is not None and not loser.passed and loser.rung == 1 and loser.step == 3
    assert loser.reference == 700.0 and loser.optimistic == pytest.approx(600.0)
    close = RULE.judge(_at(3, 3, 600.0), 2, BEST)  # 600 x 1.2 = 720 >= 700
    assert close is not None and close.passed


def test_failed_tasks_widen_the_bound_instead_of_condemning() -> None:
    # 2 of 3 succeeded: the success share could still be 0.99, so the candidate is judged on
    # nearly all three tasks, not on its two successes.
    verdict = RULE.judge(_at(3, 2, 450.0), 2, BEST)
    assert verdict is not None and verdict.passed


def test_only_crossing_a_rung_judges_and_a_skipped_rung_judges_the_higher() -> None:
    assert RULE.judge(_at(4, 4, 100.0), 3, BEST) is None  # between rungs: no verdict
    assert RULE.judge(_at(2, 2, 100.0), 1, BEST) is None  # before the first
    skipped = RULE.judge(_at(7, 7, 100.0), 2, BEST)  # 3 and 6 both crossed in one report
    assert skipped is not None and skipped.rung == 2 and not skipped.passed


def test_with_nothing_completed_a_candidate_passes() -> None:
    verdict = RULE.judge(_at(3, 3, 1.0), 2, None)
    assert verdict is not None and verdict.passed and verdict.reference is None


def test_clopper_pearson_upper_bounds() -> None:
    assert binomial_upper(3, 3) == 1.0
    assert binomial_upper(0, 3) == pytest.approx(1 - 0.025 ** (1 / 3), abs=1e-6)
    assert binomial_upper(5, 10) == pytest.approx(0.8130, abs=1e-3)  # the textbook table value


def _study(rule: PruneRule, seed: int) -> tuple[optuna.Study, GridReplayBackend, GridTable]:
    table = GridTable.load(DATA)
    backend = GridReplayBackend(table, 1, random.Random(seed))
    study = optuna.create_study(direction="maximize")
    make = request_factory(table.preset, model_path="recorded", cache_dir=Path("."))
    settings = LoopSettings(n_trials=len(table.configs), seed=seed, prune_rule=rule)
    StudyLoop(study, table.preset, backend, make, settings).run()
    return study, backend, table


def test_the_loop_screens_losers_marks_the_rung_and_charges_what_they_ran() -> None:
    screened: list[optuna.trial.FrozenTrial] = []
    for seed in range(6):
        study, backend, table = _study(PruneRule(screening=RULE), seed)
        total = len(table.task_ids)
        for t in study.get_trials(deepcopy=False):
            at = t.user_attrs.get(TrialAttr.SCREENED_OUT_AT)
            role = t.user_attrs[TrialAttr.ROLE]
            if role == Role.BASELINE:
                assert at is None and TrialAttr.RUNG not in t.user_attrs  # never screened
            if at is None:
                if t.state.name == "COMPLETE" and role == Role.CANDIDATE:
                    assert t.user_attrs[TrialAttr.RUNG] == 2  # both rungs passed
                continue
            screened.append(t)
            assert t.state.name == "PRUNED"
            assert at["rung"] in (1, 2) and at["tasks"] in RULE.steps(total)
            assert at["optimistic_tasks_per_hour"] < at["best_tasks_per_hour"]
            # The trial stopped asking for tasks: it ran a prefix and cost less than in full.
            assert t.user_attrs[TrialAttr.PRUNED_AT_TASKS] < total
            start, end = backend.spans[t.number]
            assert end - start < backend.sims[t.number].cost_s()
            assert t.user_attrs.get(TrialAttr.RUNG, 0) == at["rung"] - 1
    assert screened, "no trial was screened in 6 seeded studies of the recorded grid"


def test_without_screening_no_trial_carries_a_rung() -> None:
    study, _, _ = _study(PruneRule(), 0)
    for t in study.get_trials(deepcopy=False):
        assert TrialAttr.RUNG not in t.user_attrs
        assert TrialAttr.SCREENED_OUT_AT not in t.user_attrs


def test_tuner_optimize_screens_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import tuner.study.pipeline as pipeline
    from tuner.cli import app
    from tuner.study.search.options import OptimizeOptions, loop_settings

    seen: list[OptimizeOptions] = []

    def capture(_preset: object, options: OptimizeOptions, **_: object) -> None:
        seen.append(options)
        raise SystemExit(0)  # the options are what this test checks; the study is not run

    monkeypatch.setattr(pipeline, "optimize", capture)
    # --ray-address: the command would join a cluster (never reached: see stub_cluster_join).
    stub_cluster_join(monkeypatch)
    base = ["optimize", "--model", "smollm2-135m", "--gpu", "cpu", "--ray-address",
            "127.0.0.1:1", "--storage", f"sqlite:///{tmp_path / 't.db'}"]  # fmt: skip
    runner = CliRunner()
    for args in (base, [*base, "--screening"], [*base, "--no-screening"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    assert [o.screening for o in seen] == [None, True, False]
    unset, on, off = seen
    screens = load_preset(model="smollm2-135m", gpu="cpu").model_copy(update={"screening": True})
    plain = screens.model_copy(update={"screening": False})
    # Unset: the preset decides; either flag wins over the preset.
    assert loop_settings(unset, budgeted=True, preset=plain).prune_rule.screening is None
    assert loop_settings(unset, budgeted=True, preset=screens).prune_rule.screening == (
        ScreenRule()
    )
    assert loop_settings(off, budgeted=True, preset=screens).prune_rule.screening is None
    rule_on = loop_settings(on, budgeted=True, preset=plain).prune_rule
    assert rule_on.screening == ScreenRule()
    assert rule_on.min_completed == PruneRule().min_completed  # the baseline rule is unchanged
