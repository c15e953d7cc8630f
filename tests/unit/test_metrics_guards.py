"""The acceptance guard on counter sequences as /metrics scrapes give them (cumulative)."""

from __future__ import annotations

import asyncio

import pytest

from tuner.metrics.guards import (
    AcceptanceCollapse,
    AcceptanceCollapsed,
    AcceptanceGuard,
    AcceptanceGuardSettings,
    run_guarded,
)

SETTINGS = AcceptanceGuardSettings(window_tokens=100, min_scrapes=3, floor=0.02, healthy_rate=0.1)


def _feed(points: list[tuple[float, float | None, float | None]]) -> list[object]:
    guard = AcceptanceGuard(SETTINGS)
    return [guard.observe(t, d, a) for t, d, a in points]


def test_healthy_then_drafting_without_accepting_is_a_collapse_with_the_numbers() -> None:
    seen = _feed([(0, 0, 0), (1, 100, 50), (2, 160, 50), (3, 220, 50)])
    assert seen[:3] == [None, None, None]
    collapse = seen[3]
    assert collapse == AcceptanceCollapse(
        healthy_drafted=100, healthy_accepted=50, drafted=120, accepted=0, seconds=2, scrapes=3
    )
    assert collapse.reason().startswith(
        "acceptance collapsed: 0 of 120 drafted tokens accepted (0.0%) over the last 2.0 s "
        "(3 /metrics scrapes), after 50 of 100 (50.0%) at first"
    )


def test_a_collapse_is_seen_when_each_scrape_drafts_more_than_a_window() -> None:
    # A fast server drafts 300 tokens between scrapes (window 100): the window must still span 3
    # scrapes. Found on merged main: the fake-vLLM collapse test passed or failed by how many
    # tokens fell between two scrapes.
    seen = _feed([(0, 0, 0), (1, 300, 150), (2, 600, 150), (3, 900, 150)])
    assert seen[:3] == [None, None, None]
    assert seen[3] == AcceptanceCollapse(
        healthy_drafted=300, healthy_accepted=150, drafted=600, accepted=0, seconds=2, scrapes=3
    )


def test_a_config_that_never_accepted_is_slow_not_collapsed() -> None:
    points = [(float(i), 60.0 * i, 0.0) for i in range(30)]
    assert _feed(points) == [None] * 30


def test_a_slow_start_that_turns_healthy_is_watched_from_then_on() -> None:
    # 0% for the first 120 drafted tokens, then 50%, then nothing accepted again
    points = [(0, 0, 0), (1, 120, 0), (2, 240, 60), (3, 360, 120), (4, 420, 120), (5, 480, 120)]
    seen = _feed(points)
    assert seen[:5] == [None] * 5
    assert isinstance(seen[5], AcceptanceCollapse) and seen[5].drafted == 120


def test_low_but_above_the_floor_is_not_a_collapse() -> None:
    points = [(0, 0, 0), (1, 100, 50), (2, 200, 53), (3, 300, 56), (4, 400, 59)]  # 3% after
    assert _feed(points) == [None] * 5


def test_one_big_jump_is_not_enough_scrapes() -> None:
    # 300 tokens drafted, none accepted, but between two scrapes only: not "kept rising" yet
    seen = _feed([(0, 0, 0), (1, 100, 50), (2, 400, 50)])
    assert seen == [None, None, None]


def test_counters_going_back_start_the_watch_again() -> None:
    # the engine restarted: its counters start at 0 again, and must be healthy again first
    points = [(0, 0, 0), (1, 100, 50), (2, 130, 50), (3, 10, 0), (4, 80, 0), (5, 150, 0)]
    assert _feed(points) == [None] * 6


def test_no_speculation_counters_never_trigger() -> None:
    assert _feed([(float(i), None, None) for i in range(10)]) == [None] * 10


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="min_scrapes"):
        AcceptanceGuardSettings(min_scrapes=1)
    with pytest.raises(ValueError, match="interval_s"):
        AcceptanceGuardSettings(interval_s=0)


def test_run_guarded_stops_the_work_on_the_guards_error() -> None:
    collapse = AcceptanceCollapse(100, 50, 120, 0, 2.0, 3)
    cancelled = []

    async def work() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "finished"

    async def guard() -> None:
        await asyncio.sleep(0.05)
        raise AcceptanceCollapsed(collapse, answered_requests=7)

    with pytest.raises(AcceptanceCollapsed) as err:
        asyncio.run(run_guarded(work(), guard()))
    assert err.value.answered_requests == 7 and err.value.collapse is collapse
    assert cancelled == [True]


def test_run_guarded_returns_the_work_and_cancels_the_guard() -> None:
    stopped = []

    async def work() -> str:
        await asyncio.sleep(0.05)
        return "finished"

    async def guard() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append(True)
            raise

    assert asyncio.run(run_guarded(work(), guard())) == "finished"
    assert stopped == [True]
    assert asyncio.run(run_guarded(work(), None)) == "finished"
