"""The confirmation stage through the real driver and Ray workers, on stand-in servers.

`tuner.testing.fake_vllm` is the named fake: its speculative servers are made faster
(`FAKE_VLLM_SPEC_SPEEDUP`) and lossy (`FAKE_VLLM_CHANGE_OUTPUTS`), which a real CPU build cannot
be made to do on purpose. The real CPU build's confirmation run is measured in docs/measurements.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tests.integration.conftest import fake_options, fake_preset, fake_vllm_ray
from tuner.attrs import StudyAttr, TrialAttr
from tuner.results import choose_export, load_results, render_export
from tuner.results.decision import judge_study
from tuner.server.knobs import suffix_decoding_available
from tuner.storage import Store
from tuner.study import Preset, optimize
from tuner.study.search.roles import counts_toward_budget, enqueue_run
from tuner.study.stages.confirm import confirm_study
from tuner.study.stages.confirm_plan import ConfirmPlan

pytestmark = pytest.mark.ray

NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 2,
    "prompt_lookup_min": 1,
    "prompt_lookup_max": 3,
    "max_num_seqs": 8,
}


@pytest.fixture(scope="module")
def fake_ray() -> Iterator[None]:
    with fake_vllm_ray(num_gpus=1):
        yield


def _preset(*, lossy: bool, speedup: float = 4.0, tasks: int = 6) -> Preset:
    server_env = {
        "FAKE_VLLM_STARTUP_S": "0.5",
        "FAKE_VLLM_TOKEN_DELAY_S": "0.01",
        "FAKE_VLLM_SPEC_SPEEDUP": str(speedup),
    }
    if lossy:
        server_env["FAKE_VLLM_CHANGE_OUTPUTS"] = "1"
    data = fake_preset(
        server_env,
        tasks=tasks,
        tool_latency_s=0.0,
        gpu={"name": "fake1", "memory_gib": 24, "count": 1},
        throughput_streams=[],
    )
    return Preset.model_validate(data)


def _searched(preset: Preset, tmp_path: Path) -> Any:
    from tuner.study import open_study

    options = fake_options(tmp_path, 1)
    optimize(preset, options)  # the baseline
    study = open_study(preset, options)
    study.enqueue_trial(NGRAM, user_attrs={TrialAttr.ROLE: "candidate"})
    optimize(preset, options)  # --n-trials counts per run: this one runs the queued n-gram
    return options


def _order(study: optuna.Study) -> list[tuple[int, int]]:
    runs = [t for t in study.trials if t.user_attrs.get(TrialAttr.ROLE) == "confirm"]
    return [
        (t.user_attrs[TrialAttr.CONFIRM_OF], t.user_attrs[TrialAttr.CONFIRM_ROUND]) for t in runs
    ]


def test_confirmation_reruns_interleaved_and_the_winner_is_judged_on_its_rounds(
    fake_ray: None, tmp_path: Path
) -> None:
    options = _searched(_preset(lossy=False), tmp_path)
    summary = confirm_study(options, ConfirmPlan(k=1, rounds=2))
    assert summary.configs == (0, 1) and summary.queued == 4

    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    runs = [t for t in study.trials if t.user_attrs.get(TrialAttr.ROLE) == "confirm"]
    # The baseline's round 0 (the probe's floor) runs first, then A B, B A (a drift cancels).
    assert _order(study) == [(0, 0), (1, 0), (1, 1), (0, 1)]
    assert all(t.state == TrialState.COMPLETE for t in runs)
    base_params = study.trials[0].params
    assert [t.params for t in runs] == [base_params, NGRAM, NGRAM, base_params]
    # Stored like trials, each on a fresh server start; never counted toward --n-trials.
    store = Store(options.storage_url)
    starts = [store.server_starts("fake", t.number)[-1].record for t in runs]
    store.close()
    assert len({s.started_at for s in starts}) == 4
    assert sum(counts_toward_budget(t) for t in study.trials) == 2
    assert all(TrialAttr.PROBE in t.user_attrs for t in study.trials)
    assert study.user_attrs[StudyAttr.BETWEEN_RUN_NOISE]["log_sd"] > 0  # stored with the study

    results = load_results(options.storage_url, "fake")
    verdict = judge_study(results)[1]
    assert verdict.confirmed_runs == 2
    assert verdict.paired is not None and verdict.paired.rounds == 2
    assert verdict.beats_baseline  # 4x faster per token, paired over both rounds
    assert not verdict.changes_outputs
    choice = choose_export(results)
    assert choice.trial.number == 1 and choice.confirmed
    assert "beats the baseline" in choice.reason and "unconfirmed" not in choice.reason

    # Run again (a resumed study): nothing is repeated.
    again = confirm_study(options, ConfirmPlan(k=1, rounds=2))
    assert again.queued == 0
    assert len(optuna.load_study(study_name="fake", storage=options.storage_url).trials) == 6
    # A run queued by hand with the seam is picked up by the next confirmation call.
    enqueue_run(
        study, NGRAM, role="confirm", attrs={TrialAttr.CONFIRM_OF: 1, TrialAttr.CONFIRM_ROUND: 2}
    )
    # Round 2's baseline run is queued for it: every average is over paired rounds.
    assert confirm_study(options, ConfirmPlan(k=1, rounds=3)).queued == 1
    rounds = judge_study(load_results(options.storage_url, "fake"))[1].confirmed_runs
    assert rounds == 3


def test_a_flagged_config_is_skipped_and_the_floor_runs_with_confirm_0(
    fake_ray: None, tmp_path: Path
) -> None:
    # Today's code (before issue 21) ran no second baseline start with --confirm 0, so nothing
    # could be flagged; and with confirmation on, it spent the slot on the lossy config.
    options = _searched(_preset(lossy=True), tmp_path)
    summary = confirm_study(options, ConfirmPlan(k=0, rounds=0))
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    assert _order(study) == [(0, 0)]  # the floor start, and nothing else
    assert summary.queued == 1
    results = load_results(options.storage_url, "fake")
    verdict = judge_study(results)[1]
    assert verdict.outputs is not None and verdict.outputs.floor == pytest.approx(1.0)
    assert verdict.changes_outputs
    choice = choose_export(results)
    assert choice.trial.number == 0 and not choice.confirmed
    assert "changes outputs" in choice.reason
    assert study.user_attrs[StudyAttr.CONFIRMATION]["1"]["changes_outputs"] is True
    assert study.user_attrs[StudyAttr.MODE_NOTE] == "load shape: answers not graded"

    # Confirmation now: the flagged n-gram is skipped, so only the baseline is left and
    # nothing is re-run (the baseline alone has nothing to be paired with).
    summary = confirm_study(options, ConfirmPlan(k=1, rounds=2))
    assert summary.configs == (0,) and summary.queued == 0
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    assert _order(study) == [(0, 0)]


# About 104 s of fake servers through Ray (the slowest fake suite item in CI, 2026-12-07); the
# futility rule itself is tests/unit/test_sequential_confirm.py's, so this end-to-end drop runs
# with `-m extended` (tests/conftest.py) to keep CI under 45 minutes (docs/ci.md).
@pytest.mark.extended
def test_a_futile_config_is_dropped_and_the_stage_stops_when_none_can_gain(
    fake_ray: None, tmp_path: Path
) -> None:
    # Two finalists: the n-gram config, made twice as slow (FAKE_VLLM_SPEC_SPEEDUP 0.5), and a
    # copy of the baseline (`--also-try baseline`). After the first look the slow one cannot
    # gain 5% and gets no more rounds; the copy runs on until its upper bound is under x1.05
    # too. Before issue 34's futility rule both ran to the cap.
    from tuner.study import open_study
    from tuner.study.search.roles import enqueue_baseline_copy

    preset = _preset(lossy=False, speedup=0.5, tasks=3)
    options = fake_options(tmp_path, 1)
    optimize(preset, options)  # the baseline
    study = open_study(preset, options)
    study.enqueue_trial(NGRAM, user_attrs={TrialAttr.ROLE: "candidate"})
    assert enqueue_baseline_copy(study, study.trials[0].params)
    optimize(preset, fake_options(tmp_path, 2))
    lines: list[str] = []
    summary = confirm_study(options, ConfirmPlan(k=2, rounds=8), say=lines.append)
    assert set(summary.configs) == {0, 1, 2}, summary

    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    rounds: dict[int, list[int]] = {}
    for of, r in _order(study):
        rounds.setdefault(of, []).append(r)
    slow = next(n for n in (1, 2) if study.trials[n].params.get("method") == "ngram")
    copy = 3 - slow
    assert rounds[slow] == [0, 1], rounds  # dropped at the first look, after round 2
    assert rounds[copy] == list(range(len(rounds[copy]))) and 3 <= len(rounds[copy]) < 8
    assert rounds[0] == rounds[copy]  # every round (round 0's is the floor start)
    assert any(f"one more round without #{slow}" in line for line in lines), lines
    # Without a budget the stage says the power its --confirm rounds have at the study's noise.
    power = [line for line in lines if line.startswith("confirmation: the top 2 and the")]
    assert len(power) == 1 and "(--confirm 2,8)" in power[0], lines
    assert "power for a true +10% (simulated" in power[0], power
    assert summary.stopped is not None and "no config can still beat" in summary.stopped[1]
    # Its verdict stands on the rounds it ran.
    verdict = judge_study(load_results(options.storage_url, "fake"))[slow]
    assert verdict.paired is not None and verdict.paired.rounds == 2
    assert verdict.paired.ratio < 0.8
    # Resumed (a second driver, or the same command again): the drop is found again and
    # nothing is queued for the dropped config.
    assert confirm_study(options, ConfirmPlan(k=2, rounds=8)).queued == 0


def test_a_round_that_cannot_finish_inside_the_budget_is_not_queued(
    fake_ray: None, tmp_path: Path
) -> None:
    from tuner.study.search.budget import Budget

    class _SlowerThanPlanned(Budget):
        # Runs came out at 100 s each after the stage had planned 3 rounds on faster ones.
        def run_s(self) -> float:
            return 100.0

        def confirm_plan(self) -> tuple[int, int]:
            return 1, 3

    preset = _preset(lossy=False)
    options = _searched(preset, tmp_path)
    # 190 s for runs after the end's reserve: the floor start (1 run) and round 1's candidate
    # run fit one at a time; round 2 (2 runs, 200 s) never does.
    budget = _SlowerThanPlanned(
        30 + 190, k=1, rounds=3, floor=True, baseline_every=5, estimate_s=100.0
    )
    said: list[str] = []
    summary = confirm_study(replace(options, budget=budget), ConfirmPlan(1, 3), say=said.append)
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    assert _order(study) == [(0, 0), (1, 0)]
    stop = study.user_attrs[StudyAttr.CONFIRM_STOP]
    assert stop["rounds"] == 1 and stop["reason"].startswith("the budget: round 2 needs 2 runs")
    assert summary.stopped == (1, stop["reason"])
    assert any(line.startswith("confirmation: stopped after 1 round: the budget") for line in said)
    # The verdict stands on the round that ran, and the export says why the stage stopped.
    choice = choose_export(load_results(options.storage_url, "fake"))
    assert choice.confirmed and choice.stopped is not None
    assert "stopped: the budget" in choice.stopped


@pytest.mark.skipif(
    not suffix_decoding_available(),
    reason="a preset offers method suffix only with arctic-inference (scripts/install.sh)",
)
def test_a_confirmed_suffix_config_is_exported_with_its_speculative_config(
    fake_ray: None, tmp_path: Path
) -> None:
    # The fake drafts for any --speculative-config; here suffix is the 4x faster candidate.
    data = json.loads(_preset(lossy=False, tasks=4).model_dump_json())
    data["space"]["methods"] = ["none", "suffix"]
    data["space"]["suffix_decoding_min_token_prob"] = {"low": 0.1, "high": 0.3, "step": 0.1}
    preset = Preset.model_validate(data)
    from tuner.study import open_study

    options = fake_options(tmp_path, 1)
    optimize(preset, options)  # the baseline
    suffix = {
        "method": "suffix",
        "num_speculative_tokens": 4,
        "suffix_decoding_min_token_prob": 0.2,
        "max_num_seqs": 8,
    }
    open_study(preset, options).enqueue_trial(suffix, user_attrs={TrialAttr.ROLE: "candidate"})
    optimize(preset, options)
    confirm_study(options, ConfirmPlan(k=1, rounds=2))
    choice = choose_export(load_results(options.storage_url, "fake"))
    assert choice.trial.number == 1 and choice.confirmed, choice.reason
    argv = json.loads(render_export(choice, "json"))["argv"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {
        "method": "suffix",
        "num_speculative_tokens": 4,
        "suffix_decoding_min_token_prob": 0.2,
    }
    shell = render_export(choice)
    assert '"method":"suffix"' in shell and "confirmed" in shell
