"""The study loop stepped on a scripted backend: budget, duplicates, exhaustion, resume, crashes.

The loop, sampler, pruner rule and recovery are the real code `tuner optimize` runs; only the
trials' measurements come from `tuner.testing.scripted_backend` (a named fake) on a simulated
clock, in an in-memory Optuna study without tuner's tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tuner.attrs import TrialAttr
from tuner.study.search.driver import request_factory
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopOutcome, LoopSettings
from tuner.study.search.roles import counts_toward_budget, enqueue_run, role_of
from tuner.study.search.sampling import enumerate_space
from tuner.study.space import Preset, config_key, load_preset
from tuner.testing.scripted_backend import ScriptedBackend, ScriptedRun

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def preset() -> Preset:
    return load_preset(model="smollm2-135m", gpu="cpu")


def _run(
    study: optuna.Study,
    preset: Preset,
    n_trials: int | None,
    script: Any = None,
    *,
    seed: int | None = 0,
    slots: int = 1,
) -> tuple[LoopOutcome, ScriptedBackend]:
    backend = ScriptedBackend(script or (lambda p: ScriptedRun()), n_slots=slots)
    loop = StudyLoop(
        study,
        preset,
        backend,
        request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent")),
        LoopSettings(n_trials=n_trials, seed=seed),
    )
    return loop.run(), backend


def _new() -> optuna.Study:
    return optuna.create_study(direction="maximize")


def _counted(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if counts_toward_budget(t)]


def test_n_trials_counts_servers_started_and_a_second_run_adds_as_many_new(
    preset: Preset,
) -> None:
    study = _new()
    _run(study, preset, 6)
    first = _counted(study)
    assert len(first) == 6
    assert role_of(first[0]) == "baseline" and first[0].params == preset.baseline_params()
    _, backend = _run(study, preset, 6)
    trials = _counted(study)
    assert len(trials) == 12 and len(backend.submitted) == 6
    keys = [config_key(t.params) for t in trials]
    assert len(set(keys)) == 12  # no config measured twice
    assert all(t.state == TrialState.COMPLETE for t in study.get_trials())  # no duplicate trial


def test_an_exhausted_space_stops_with_its_size(preset: Preset) -> None:
    small = preset.model_copy(
        update={
            "space": preset.space.model_copy(
                update={"methods": ("none",), "kv_cache_memory_bytes": (300_000_000, 2_000_000_000)}
            )
        }
    )
    assert len(enumerate_space(small) or []) == 4  # 2 KV sizes x 2 max_num_seqs
    study = _new()
    outcome, _ = _run(study, small, 10)
    assert outcome.exhausted_size == 4
    assert len(_counted(study)) == 4
    again, backend = _run(study, small, 3)
    assert again.exhausted_size == 4 and backend.submitted == []


def test_the_cpu_space_has_the_size_its_ranges_give(preset: Preset) -> None:
    configs = enumerate_space(preset) or []
    # none: 3 KV x 2 seqs; ngram: depth 4 x lookup pairs (min 1-3, max from min..5 with max>=2:
    # 4 + 4 + 3 = 11) x 3 KV x 2 seqs.
    assert len(configs) == 3 * 2 + 4 * 11 * 3 * 2
    assert len({config_key(c) for c in configs}) == len(configs)


def test_resumed_runs_continue_reproducibly_and_never_repeat(preset: Preset) -> None:
    def history(split: tuple[int, ...]) -> list[dict[str, Any]]:
        study = _new()
        for n in split:
            _run(study, preset, n, seed=7)
        return [t.params for t in study.get_trials()]

    once = history((4, 4))
    assert once == history((4, 4))  # same seed, same history: the same trials
    assert len({config_key(p) for p in once}) == 8
    assert history((4, 4))[:4] == history((4,))


def test_extra_roles_never_reach_the_sampler(preset: Preset) -> None:
    """A control with a terrible value on the baseline's params changes no suggestion."""
    from tuner.study.search.sampling import propose

    def rate(params: dict[str, Any]) -> ScriptedRun:
        return ScriptedRun(tasks_per_hour=50.0 + 10 * params.get("num_speculative_tokens", 0))

    base = _new()
    _run(base, preset, 12, rate)
    configs = enumerate_space(preset)
    differs = 0
    for role in ("control", "confirm", "candidate"):
        study = _new()
        study.add_trials(base.get_trials())
        study.add_trial(
            optuna.trial.create_trial(
                params=preset.baseline_params(),
                distributions=base.trials[0].distributions,
                value=0.01,
                user_attrs={TrialAttr.ROLE: role},
            )
        )
        for seed in range(5):
            args = {"seed": seed, "n_trials": 12, "configs": configs}
            got = propose(study.get_trials(), preset, **args)
            want = propose(base.get_trials(), preset, **args)
            if role == "candidate":
                differs += got != want
            else:
                assert got == want, (role, seed)
    assert differs > 0  # the same trial as a candidate does move TPE: the check can fail


def test_extra_roles_run_from_the_queue_uncounted_and_unpruned(preset: Preset) -> None:
    study = _new()
    _run(study, preset, 4, lambda p: ScriptedRun(tasks_per_hour=100.0))
    baseline = study.trials[0]
    for _ in range(2):  # the same params twice: confirmations repeat on purpose
        enqueue_run(study, baseline.params, role="confirm", attrs={"confirm_of": 0})
    _run(study, preset, None, lambda p: ScriptedRun(tasks_per_hour=5.0))  # a terrible rate
    confirms = [t for t in study.get_trials() if role_of(t) == "confirm"]
    assert [t.state for t in confirms] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert confirms[0].value == pytest.approx(5.0)
    assert len(_counted(study)) == 4
    with pytest.raises(ValueError, match="extra runs"):
        enqueue_run(study, baseline.params, role="candidate")


def test_a_queued_duplicate_is_not_run_not_counted_and_does_not_end_the_run(
    preset: Preset,
) -> None:
    study = _new()
    _run(study, preset, 2)
    repeated = study.trials[1].params
    study.enqueue_trial(repeated, user_attrs={TrialAttr.ROLE: "candidate"})
    _, backend = _run(study, preset, 2)
    dup = study.trials[2]
    assert dup.state == TrialState.FAIL
    assert dup.user_attrs[TrialAttr.DUPLICATE_OF] == 1
    assert len(_counted(study)) == 4 and len(backend.submitted) == 2
    assert all(r.params != repeated for r in backend.submitted)


def test_also_try_baseline_runs_an_identical_copy_as_a_candidate(preset: Preset) -> None:
    # `tuner optimize --also-try baseline` (the A/A check): the copy is exempt from the
    # duplicate rule both ways, runs once, counts, and the baseline still runs first.
    study = _new()
    backend = ScriptedBackend(lambda p: ScriptedRun(), n_slots=1)
    settings = LoopSettings(n_trials=3, seed=0, also_try_baseline=True)
    make = request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent"))
    StudyLoop(study, preset, backend, make, settings).run()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert role_of(trials[0]) == "baseline" and role_of(trials[1]) == "candidate"
    assert trials[1].params == trials[0].params == preset.baseline_params()
    assert trials[1].user_attrs[TrialAttr.COPY_OF] == 0
    assert trials[2].params != trials[0].params
    assert len(backend.submitted) == 3 and len(_counted(study)) == 3
    # Resumed with the option again: no second copy.
    StudyLoop(study, preset, backend, make, settings).run()
    assert sum(TrialAttr.COPY_OF in t.user_attrs for t in study.get_trials()) == 1


def test_a_worker_crash_is_retried_once_then_counts(preset: Preset) -> None:
    study = _new()
    _run(study, preset, 3, lambda p: ScriptedRun(crash="ActorDiedError: the actor died"))
    trials = study.get_trials()
    first = trials[0]
    assert first.user_attrs[TrialAttr.FAILURE_KIND] == "worker_crashed"
    assert not counts_toward_budget(first)
    retry = trials[1]
    assert retry.user_attrs[TrialAttr.REQUEUED_FROM] == 0 and retry.params == first.params
    assert retry.state == TrialState.FAIL and counts_toward_budget(retry)
    assert len(_counted(study)) == 3


def _crash_first(*, replacement_s: float) -> ScriptedBackend:
    """A backend whose first trial's worker dies; its slot is placed again `replacement_s` later."""
    calls = []

    def script(params: dict[str, Any]) -> ScriptedRun:
        calls.append(params)
        return ScriptedRun(crash="ActorDiedError: killed" if len(calls) == 1 else None)

    return ScriptedBackend(script, replacement_s=replacement_s)


def _loop(study: optuna.Study, preset: Preset, backend: ScriptedBackend, n: int) -> StudyLoop:
    make = request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent"))
    return StudyLoop(study, preset, backend, make, LoopSettings(n_trials=n))


def test_a_killed_worker_s_trial_waits_for_the_replacement_and_runs_once(preset: Preset) -> None:
    # Issue 48: the replacement worker was not placed yet when the loop looked, nothing else
    # ran, and the run ended with the re-queued trial unrun.
    study = _new()
    backend = _crash_first(replacement_s=40.0)
    _loop(study, preset, backend, 1).run()
    crashed, retry = study.get_trials()
    assert crashed.user_attrs[TrialAttr.FAILURE_KIND] == "worker_crashed"
    assert retry.state == TrialState.COMPLETE and retry.params == crashed.params
    assert retry.user_attrs[TrialAttr.REQUEUED_FROM] == crashed.number
    assert len(backend.submitted) == 2 and len(_counted(study)) == 1


def test_a_replacement_never_placed_ends_the_run_after_the_bounded_wait(preset: Preset) -> None:
    from tuner.study.search.loop import PLACEMENT_WAIT_S

    study = _new()
    backend = _crash_first(replacement_s=10 * PLACEMENT_WAIT_S)
    _loop(study, preset, backend, 1).run()
    crashed_at = 30.0  # ScriptedRun's startup_s: the crash comes when the start would end
    assert PLACEMENT_WAIT_S <= backend.clock - crashed_at <= PLACEMENT_WAIT_S + 5
    crashed, queued = study.get_trials()
    assert queued.state == TrialState.WAITING and queued.params == crashed.params
    # The next run of the command, once a worker is placed, takes it: nothing lost.
    backend.clock = 10 * PLACEMENT_WAIT_S + crashed_at
    _loop(study, preset, backend, 1).run()
    assert study.get_trials()[1].state == TrialState.COMPLETE
    assert len(study.get_trials()) == 2


def test_a_run_after_a_stop_in_the_confirmation_searches_nothing(preset: Preset) -> None:
    # Issue 48: re-running `tuner optimize` after a stop in its confirmation stage searched
    # n_trials more first (the finalists of the rounds already run could change) and ran the
    # stage's queued runs as part of the search.
    from tuner.attrs import Role, StudyAttr

    study = _new()
    _run(study, preset, 2)
    enqueue_run(
        study, preset.baseline_params(), role=Role.CONFIRM, attrs={TrialAttr.CONFIRM_ROUND: 0}
    )
    study.set_user_attr(StudyAttr.CONFIRM_PENDING, True)
    outcome, backend = _run(study, preset, 2)
    assert backend.submitted == [] and outcome.confirm_pending and outcome.target == 2
    assert len(_counted(study)) == 2
    assert [t.state for t in study.get_trials()][-1] == TrialState.WAITING  # left to the stage
    # Once the stage has finished (the flag cleared), the same command searches again.
    study.set_user_attr(StudyAttr.CONFIRM_PENDING, False)
    outcome, backend = _run(study, preset, 2)
    assert not outcome.confirm_pending and len(_counted(study)) == 4


def test_infeasible_configs_count_and_carry_a_positive_constraint(preset: Preset) -> None:
    study = _new()
    _run(
        study,
        preset,
        5,
        lambda p: ScriptedRun(infeasible=p.get("kv_cache_memory_bytes") == 300_000_000),
    )
    infeasible = [t for t in study.get_trials() if t.user_attrs.get(TrialAttr.INFEASIBLE)]
    assert len(_counted(study)) == 5
    for t in infeasible:
        assert t.state == TrialState.COMPLETE and t.value == 0.0
        assert t.system_attrs["constraints:fits_on_card"] == 1.0


def test_the_run_ends_with_one_line_saying_why_it_stopped_short(preset: Preset) -> None:
    from tuner.study.search.summary import summarize

    small = preset.model_copy(
        update={"space": preset.space.model_copy(update={"methods": ("none",)})}
    )
    study = _new()
    outcome, _ = _run(study, small, 10)
    summary = summarize(study, outcome)
    assert summary.finished == 6 and summary.target == 10
    assert summary.note == (
        "all 6 distinct configurations of this space are measured; stopped at 6 of 10 trials"
    )


def test_a_stop_request_interrupts_cleanly_and_requeues_the_running_trial(
    preset: Preset,
) -> None:
    study = _new()
    holder: list[StudyLoop] = []

    def script(params: dict[str, Any]) -> ScriptedRun:
        if len(backend.submitted) == 2:  # what SIGTERM's handler does, during the 2nd trial
            holder[0].stop_requested = True
        return ScriptedRun()

    backend = ScriptedBackend(script)
    make = request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent"))
    loop = StudyLoop(study, preset, backend, make, LoopSettings(n_trials=4))
    holder.append(loop)
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    loop.abandon()
    first, second, requeued = study.get_trials()
    assert first.state == TrialState.COMPLETE
    assert second.state == TrialState.FAIL
    assert second.user_attrs[TrialAttr.FAILURE_KIND] == "interrupted"
    assert requeued.state == TrialState.WAITING and requeued.params == second.params
