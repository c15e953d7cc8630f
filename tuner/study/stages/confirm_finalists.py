"""The confirmation stage's finalists: which trial is the baseline, which are candidates, and
which candidates get the confirmation slots, ranked on the pooled evidence of every run
(`tuner.metrics.pooled`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from optuna.trial import FrozenTrial

from tuner.attrs import Role, TrialAttr, is_feasible, role_from

if TYPE_CHECKING:
    from tuner.metrics.pooled import PooledConfig


__all__ = [
    "finalists_line",
    "plan_confirmation",
    "rank_finalists",
]


def _role(t: FrozenTrial) -> str:
    return role_from(t.user_attrs, t.number)


def _baseline(trials: list[FrozenTrial]) -> FrozenTrial | None:
    return next((t for t in trials if _role(t) == Role.BASELINE and is_feasible(t)), None)


def _candidates(trials: list[FrozenTrial], base: FrozenTrial) -> list[FrozenTrial]:
    """Feasible candidates that are not the baseline's server (a copy of it counts)."""
    return [
        t
        for t in trials
        if _role(t) == Role.CANDIDATE
        and is_feasible(t)
        and (t.params != base.params or TrialAttr.COPY_OF in t.user_attrs)
    ]


def _has_candidate(trials: list[FrozenTrial], base: FrozenTrial) -> bool:
    return any(
        _role(t) == Role.CANDIDATE
        and is_feasible(t)
        and (t.params != base.params or TrialAttr.COPY_OF in t.user_attrs)
        for t in trials
    )


def _pooled_params(t: FrozenTrial) -> dict[str, Any]:
    # A copy of the baseline (an A/A control) is a config of its own for the ranking.
    copy = t.user_attrs.get(TrialAttr.COPY_OF)
    return {**t.params, "copy_of": copy} if copy is not None else dict(t.params)


def rank_finalists(
    trials: list[FrozenTrial],
    *,
    skip: frozenset[int] | set[int] = frozenset(),
    noise_sd: float | None = None,
) -> list[tuple[FrozenTrial, PooledConfig]]:
    """The feasible candidates' configs, most likely best first, from every run of the study.

    Each config is ranked by the pooled model (`tuner.metrics.pooled`) fitted to the log
    search-time value of every feasible run, every start of the baseline included (as
    measured: a drift correction would make the baseline's starts agree by construction): its
    probability of being the best candidate, then its posterior mean. One trial stands for
    each config (its highest run). Trials in `skip` (configs the correctness probe flagged)
    are not ranked.

    Args:
        trials: The study's trials.
        skip: Trial numbers not to rank.
        noise_sd: The sd of one start's log tasks/h (None: the default prior's, per start);
            the fit may find more, never less.
    """
    from tuner.metrics import DEFAULT_NOISE
    from tuner.metrics.pooled import fit_pooled, pooled_key

    base = _baseline(trials)
    if base is None:
        return []
    candidates = [t for t in _candidates(trials, base) if (t.value or 0.0) > 0]
    if not candidates:
        return []
    # Every start of the baseline's config (trial 0, its re-runs during the search, the floor):
    # their spread is the study's own evidence of the between-start noise.
    starts = (Role.BASELINE, Role.BASELINE_RERUN, Role.CONFIRM)
    numbers = {t.number for t in candidates}
    runs = [
        (_pooled_params(t), float(t.value or 0.0))
        for t in trials
        if (
            t.number in numbers
            or (
                _role(t) in starts
                and t.params == base.params
                and TrialAttr.COPY_OF not in t.user_attrs
            )
        )
        and is_feasible(t)
        and (t.value or 0.0) > 0
    ]
    sd = noise_sd if noise_sd is not None else DEFAULT_NOISE.log_sd / math.sqrt(2)
    fit = fit_pooled(runs, baseline=dict(base.params), noise_sd=sd).by_key()
    # One trial per config: its highest run (a repeated params set is the same server).
    chosen: dict[str, FrozenTrial] = {}
    for t in sorted(candidates, key=lambda t: (-(t.value or 0.0), t.number)):
        if t.number not in skip:
            chosen.setdefault(pooled_key(_pooled_params(t)), t)
    ranked = [(t, fit[key]) for key, t in chosen.items()]
    ranked.sort(key=lambda pair: (-pair[1].p_best, -pair[1].mean, pair[0].number))
    return ranked


def plan_confirmation(
    trials: list[FrozenTrial],
    k: int,
    *,
    skip: frozenset[int] | set[int] = frozenset(),
    noise_sd: float | None = None,
    rank: Literal["pooled", "raw"] = "pooled",
) -> list[FrozenTrial]:
    """The baseline, then the `k` candidates most likely to be best on the pooled evidence of
    every run (`rank_finalists`), best first, leaving out the trials in `skip` (configs the
    correctness probe flagged). `rank="raw"`: the `k` highest search-time runs instead, the
    rule before the pooled model (benchmarks/sample_efficiency.py compares the two)."""
    base = _baseline(trials)
    if base is None:
        return []
    if rank == "raw":
        return [base, *_top_runs(trials, base, k, skip)]
    ranked = rank_finalists(trials, skip=skip, noise_sd=noise_sd)
    return [base, *(t for t, _ in ranked[:k])]


def _top_runs(
    trials: list[FrozenTrial], base: FrozenTrial, k: int, skip: frozenset[int] | set[int]
) -> list[FrozenTrial]:
    candidates = [t for t in _candidates(trials, base) if t.number not in skip]
    seen: list[dict[str, Any]] = []
    top: list[FrozenTrial] = []
    for t in sorted(candidates, key=lambda t: (-(t.value or 0.0), t.number)):
        if t.params not in seen:
            seen.append(t.params)
            top.append(t)
    return top[:k]


def finalists_line(ranked: Sequence[tuple[FrozenTrial, PooledConfig]], k: int) -> str:
    """One line: the finalists and their chances of being best, on the pooled evidence."""
    if not ranked:
        return "confirmation: no candidate to confirm"
    shown = ", ".join(
        f"#{t.number} (P(best) {c.p_best:.0%}, {c.tasks_per_hour:,.0f} tasks/h pooled over "
        f"{c.runs} run{'s' if c.runs != 1 else ''} of its own)"
        for t, c in ranked[:k]
    )
    return f"confirmation: finalists by the pooled evidence of every run: {shown}"
