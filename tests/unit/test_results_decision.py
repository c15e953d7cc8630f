"""The export rule on stored studies: paired filter first, then the best; confirmation rounds
decide when they exist; a config that changes outputs is never exported."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tuner.metrics import RunOutcomes
from tuner.results import choose_export, load_results, render_export
from tuner.results.decision import judge_study
from tuner.results.report import summary_lines
from tuner.testing.sample import SampleScore, write_sample_study

BASE_PROBE = [[100 + i, 7, 8, 9, 10, 11, 12, 13] for i in range(16)]


def _url(tmp: Path, name: str, **kw: object) -> str:
    url = f"sqlite:///{tmp / f'{name}.db'}"
    write_sample_study(url, **kw)  # type: ignore[arg-type]
    return url


def test_a_clear_winner_is_exported_when_the_top_scorer_is_wide(tmp_path: Path) -> None:
    results = load_results(_url(tmp_path, "two", ngram=SampleScore(900, 850, 950)))
    base, ngram = results.trials[0], results.trials[1]
    assert base.outcomes is not None
    ids = [tid for tid, _, _ in base.outcomes.outcomes]
    # #1 scores highest (1,100 tasks/h) but its tasks took 3, 10 and 20 s against the baseline's
    # 10 each: paired by task, its ratio's interval reaches below 1. #7 is 10% faster on every
    # task: a smaller estimate, tightly above 1.
    wide = replace(
        ngram,
        tasks_per_hour=1100.0,
        outcomes=RunOutcomes(
            tuple((t, True, s) for t, s in zip(ids, (3.0, 10.0, 20.0), strict=True)), 9.8
        ),
    )
    tight_wall = base.outcomes.wall_s / 1.1
    tight = replace(
        ngram,
        number=7,
        tasks_per_hour=base.outcomes.tasks_per_hour * 1.1,
        outcomes=RunOutcomes(tuple((t, True, 10.0 / 1.1) for t in ids), tight_wall),
    )
    choice = choose_export(replace(results, trials=(base, wide, tight)))
    assert choice.verdicts[1].paired is not None and not choice.verdicts[1].beats_baseline
    assert choice.trial.number == 7
    assert choice.verdict is not None and choice.verdict.paired is not None
    assert choice.verdict.paired.ratio == pytest.approx(1.1)
    assert "#1 scored higher but did not pass" in choice.reason


def test_confirmation_rounds_overrule_a_lucky_search_run(tmp_path: Path) -> None:
    # n-gram's search run beat the baseline (900 vs 752); three fresh rounds put them level.
    url = _url(
        tmp_path,
        "lucky",
        ngram=SampleScore(900, 850, 950),
        confirm=((752.0, 700.0), (700.0, 760.0), (760.0, 730.0)),
    )
    results = load_results(url)
    assert [t.confirm_round for t in results.confirm_runs(1)] == [0, 1, 2]
    verdict = judge_study(results)[1]
    assert verdict.confirmed and verdict.confirmed_runs == 3
    assert verdict.confirmed_tph == pytest.approx((700 + 760 + 730) / 3)
    assert verdict.paired is not None and verdict.paired.rounds == 3
    assert verdict.paired.low < 1.0 < verdict.paired.high
    choice = choose_export(results)
    assert choice.trial.number == 0
    assert "confirmation rounds" in choice.reason
    # Confirmation runs are measurements, never exported themselves nor listed as configs.
    assert all(t.role != "confirm" for t in results.measured())


def test_confirmed_winner_is_exported_with_both_values(tmp_path: Path) -> None:
    url = _url(
        tmp_path,
        "confirmed",
        ngram=SampleScore(900, 850, 950),
        confirm=((750.0, 860.0), (740.0, 850.0)),
    )
    choice = choose_export(load_results(url))
    assert choice.trial.number == 1
    text = render_export(choice)
    assert "# confirmed: 855 completed tasks/h over 2 fresh starts" in text
    assert "# completed tasks/h: 900 [850, 950] (search-time run" in text


def test_a_server_that_changes_outputs_is_flagged_and_never_exported(tmp_path: Path) -> None:
    second = [list(p) for p in BASE_PROBE]
    second[3][7] = 0  # two baseline starts: one token differs in 128
    changed = [[*p[:2], 1, 2, 3, 4, 5, 6] for p in BASE_PROBE]  # differs from the 3rd token
    url = _url(
        tmp_path,
        "changes",
        ngram=SampleScore(900, 850, 950),  # fast, and paired above the baseline
        confirm=((750.0, 860.0),),
        probes={"baseline": BASE_PROBE, "ngram": changed, "baseline2": second},
    )
    results = load_results(url)
    verdict = judge_study(results)[1]
    assert verdict.beats_baseline and verdict.changes_outputs
    assert verdict.outputs is not None
    assert verdict.outputs.match == pytest.approx(0.25)
    assert verdict.outputs.floor == pytest.approx(1 - 1 / 128)
    choice = choose_export(results)
    assert choice.trial.number == 0
    assert "it changes outputs" in choice.reason
    assert any("changes outputs" in line for line in summary_lines(results))


def test_an_unchanged_server_passes_the_output_check(tmp_path: Path) -> None:
    url = _url(
        tmp_path,
        "same",
        ngram=SampleScore(900, 850, 950),
        confirm=((750.0, 860.0),),
        probes={"baseline": BASE_PROBE, "ngram": BASE_PROBE, "baseline2": BASE_PROBE},
    )
    choice = choose_export(load_results(url))
    assert choice.trial.number == 1
    assert "token match 1.00 vs floor 1.00: within the floor" in render_export(choice)


def test_replay_says_load_shape_and_completed(tmp_path: Path) -> None:
    results = load_results(_url(tmp_path, "replay", ngram=SampleScore(900, 850, 950)))
    assert results.mode == "replay"
    text = render_export(choose_export(results))
    assert "# workload mode: replay (load shape: answers not graded)" in text
    assert "completed 3 of 3 tasks" in text and "solved" not in text
    live = load_results(_url(tmp_path, "live", ngram=SampleScore(900, 850, 950), mode="live"))
    assert "solved 3 of 3 tasks" in render_export(choose_export(live))


def test_report_shows_search_time_and_confirmed_values(tmp_path: Path) -> None:
    from tuner.results import report_tables

    url = _url(
        tmp_path,
        "report",
        ngram=SampleScore(900, 850, 950),
        confirm=((750.0, 860.0), (740.0, 850.0)),
    )
    results = load_results(url)
    table = report_tables(results)[0]
    assert table.column("trial")[:2] == ["#0", "#1"]
    assert table.column("search-time vs confirmed tasks/h")[:2] == [
        "reference",
        "900 vs 855 (2 runs, 850-860)",
    ]
    assert table.column("paired vs baseline")[1].endswith("over 2 rounds of 3 tasks")
    lines = summary_lines(results)
    assert "Workload mode: replay (load shape: answers not graded)" in lines
    assert any(
        "search-time 900 completed tasks/h, confirmed 855 over 2 fresh starts" in line
        for line in lines
    )
