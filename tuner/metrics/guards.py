"""Guards during a trial, from what the server already exposes: its /metrics counters.

Speculative decoding can fail without failing: vLLM keeps drafting and keeps answering while no
draft token is accepted any more (vLLM #52873, past position 32,768; #52756, drafts scheduled
past the drafter's length, both at 0% acceptance for the rest of the run). Such a trial is
slower than it should be, and a tuner that scores it learns "this config is slow" when the truth
is "this config breaks here". The acceptance guard watches the cumulative counters
`vllm:spec_decode_num_draft_tokens_total` and `..._num_accepted_tokens_total` scrape by scrape
during the scored window, and says "collapsed" when

- the acceptance was healthy first: at least `healthy_rate` over the first `window_tokens`
  drafted tokens or more (a config that never accepts is a slow config, not a collapse), and
- then, over the latest window of at least `window_tokens` drafted tokens spanning at least
  `min_scrapes` scrapes, drafts kept rising while acceptance stayed under `floor`.

The trial is then stopped and recorded infeasible, "acceptance collapsed", with the numbers.
A counter that goes backwards (a restarted engine) starts the watch again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from tuner.errors import WorkloadError
from tuner.metrics.prometheus import SPEC_ACCEPTED, SPEC_DRAFT_TOKENS, parse_metrics

__all__ = [
    "AcceptanceCollapse",
    "AcceptanceCollapsed",
    "AcceptanceGuard",
    "AcceptanceGuardSettings",
    "run_guarded",
    "watch_acceptance",
]

T = TypeVar("T")

# The scrape's query string marks the guard's reads in vLLM's access log ("GET
# /metrics?guard=acceptance"), apart from the two reads that bracket the scored window (the fault
# suite finds a trial's phase by those). vLLM's /metrics (prometheus_client) ignores it.
GUARD_QUERY = "guard=acceptance"


class AcceptanceGuardSettings(BaseModel):
    """When the acceptance guard stops a trial (user input: frozen, unknown keys rejected).

    Attributes:
        enabled: False turns the guard off.
        interval_s: Seconds between two /metrics scrapes during the scored window.
        floor: Acceptance under this over the latest window is a collapse...
        healthy_rate: ...once the acceptance was at least this over the first window.
        window_tokens: Drafted tokens a window needs, at least.
        min_scrapes: Scrapes a collapse window spans, at least (drafts "keep rising").
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    interval_s: float = Field(default=5.0, gt=0)
    floor: float = Field(default=0.02, ge=0, lt=1)
    healthy_rate: float = Field(default=0.10, gt=0, le=1)
    window_tokens: int = Field(default=512, ge=1)
    min_scrapes: int = Field(default=3, ge=2)


@dataclass(frozen=True)
class AcceptanceCollapse:
    """The numbers of a collapse: the healthy start, then the window that stopped accepting."""

    healthy_drafted: int
    healthy_accepted: int
    drafted: int
    accepted: int
    seconds: float
    scrapes: int

    @property
    def healthy_rate(self) -> float:
        return self.healthy_accepted / self.healthy_drafted

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted

    def reason(self) -> str:
        """One line for the trial's failure reason."""
        return (
            f"acceptance collapsed: {self.accepted:,} of {self.drafted:,} drafted tokens "
            f"accepted ({100 * self.rate:.1f}%) over the last {self.seconds:.1f} s "
            f"({self.scrapes} /metrics scrapes), after {self.healthy_accepted:,} of "
            f"{self.healthy_drafted:,} ({100 * self.healthy_rate:.1f}%) at first; the server "
            "kept drafting without accepting, so the trial was stopped, not scored as slow"
        )


class AcceptanceCollapsed(WorkloadError):
    """The acceptance guard stopped the workload; `collapse` holds the numbers."""

    def __init__(self, collapse: AcceptanceCollapse, *, answered_requests: int | None = None):
        super().__init__(collapse.reason(), answered_requests=answered_requests)
        self.collapse = collapse


@dataclass
class AcceptanceGuard:
    """Feed it each scrape's cumulative counters; it returns the collapse when there is one."""

    settings: AcceptanceGuardSettings = field(default_factory=AcceptanceGuardSettings)
    points: list[tuple[float, float, float]] = field(default_factory=list)  # (t, drafted, acc.)
    healthy: tuple[int, int] | None = None  # (drafted, accepted) of the healthy first window

    def observe(
        self, t: float, drafted: float | None, accepted: float | None
    ) -> AcceptanceCollapse | None:
        """The collapse this scrape shows, or None (no speculation counters: never)."""
        if drafted is None or accepted is None:
            return None
        if self.points and (drafted < self.points[-1][1] or accepted < self.points[-1][2]):
            self.points.clear()  # counters went back: a new engine
            self.healthy = None
        self.points.append((t, drafted, accepted))
        _, d0, a0 = self.points[0]
        s = self.settings
        if self.healthy is None:
            if drafted - d0 >= s.window_tokens:
                if (accepted - a0) / (drafted - d0) >= s.healthy_rate:
                    self.healthy = (int(drafted - d0), int(accepted - a0))
                    del self.points[:-1]  # the collapse window starts after the healthy one
                else:
                    del self.points[0]  # slide: a slow start may still turn healthy
            return None
        # The latest start point that leaves at least window_tokens drafted up to now AND spans
        # min_scrapes scrapes. (Taking the latest point with enough tokens alone never fired when
        # one scrape interval drafts more than window_tokens: it always spanned 2 scrapes.)
        for i in range(len(self.points) - s.min_scrapes, -1, -1):
            ti, di, ai = self.points[i]
            if drafted - di >= s.window_tokens:
                scrapes = len(self.points) - i
                rate = (accepted - ai) / (drafted - di)
                if rate < s.floor:
                    return AcceptanceCollapse(
                        healthy_drafted=self.healthy[0],
                        healthy_accepted=self.healthy[1],
                        drafted=int(drafted - di),
                        accepted=int(accepted - ai),
                        seconds=t - ti,
                        scrapes=scrapes,
                    )
                return None
        return None


async def watch_acceptance(
    client: httpx.AsyncClient,
    base_url: str,
    settings: AcceptanceGuardSettings,
    answered: Callable[[], int],
    clock: Callable[[], float],
) -> None:
    """Scrape /metrics every `interval_s` and raise `AcceptanceCollapsed` on a collapse.

    Returns when the server exports no metrics; a failed scrape is skipped (the agents see a
    dead server themselves).
    """
    guard = AcceptanceGuard(settings)
    while True:
        await asyncio.sleep(settings.interval_s)
        try:
            response = await client.get(f"{base_url}/metrics?{GUARD_QUERY}")
        except httpx.HTTPError:
            continue
        if response.status_code != 200:
            return
        snapshot = parse_metrics(response.text)
        collapse = guard.observe(
            clock(), snapshot.total(SPEC_DRAFT_TOKENS), snapshot.total(SPEC_ACCEPTED)
        )
        if collapse is not None:
            raise AcceptanceCollapsed(collapse, answered_requests=answered())


async def run_guarded(work: Awaitable[T], guard: Awaitable[None] | None) -> T:
    """`work`, stopped by the first error `guard` raises (the guard is cancelled at the end)."""
    if guard is None:
        return await work
    work_task = asyncio.ensure_future(work)
    guard_task = asyncio.ensure_future(guard)
    try:
        await asyncio.wait({work_task, guard_task}, return_when=asyncio.FIRST_COMPLETED)
        if guard_task.done() and not guard_task.cancelled() and guard_task.exception():
            work_task.cancel()
            await asyncio.gather(work_task, return_exceptions=True)
            raise guard_task.exception()  # type: ignore[misc]
        return await work_task
    finally:
        for task in (work_task, guard_task):
            if not task.done():
                task.cancel()
        await asyncio.gather(work_task, guard_task, return_exceptions=True)
