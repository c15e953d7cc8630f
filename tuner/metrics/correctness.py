"""Correctness: did a config change the answers? Greedy probe outputs and live success rates.

With greedy decoding speculation is lossless in principle, but verifying several tokens at once
changes matrix shapes and rounding, and on some machines that flips near-ties: two tokens whose
log-probabilities almost tie swap places, and the greedy answer goes its own way from there.
`judge_outputs` therefore judges each prompt's FIRST divergent token: where the baseline's top-1
and the candidate's token were a near-tie in the baseline's own log-probabilities (a margin under
a threshold calibrated from baseline-vs-baseline starts), the divergence is rounding; a clear
margin, or divergence that starts early in many prompts, is breakage. Answers without
log-probabilities (older studies, servers that give none) fall back to the token match against
the floor of baseline restarts. `two_proportion_drop` tests a live success rate against the
baseline's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from tuner.metrics.scoring import percentile

__all__ = [
    "DEFAULT_TIE_MARGIN",
    "MIN_GAP",
    "Divergence",
    "OutputCheck",
    "ProbeAnswers",
    "calibrate_tie_margin",
    "first_divergences",
    "judge_outputs",
    "match_rates",
    "two_proportion_drop",
]


def two_proportion_drop(
    successes: int, tasks: int, base_successes: int, base_tasks: int, *, alpha: float = 0.05
) -> float | None:
    """One-sided p-value that a success rate is below the baseline's (two-proportion z-test).

    Returns None when either side has no tasks or both rates are 0 or 1 (nothing to test).
    The caller flags a drop when the value is below `alpha`.
    """
    del alpha  # the threshold belongs to the caller; kept in the signature to document it
    if tasks <= 0 or base_tasks <= 0:
        return None
    p1, p2 = successes / tasks, base_successes / base_tasks
    pooled = (successes + base_successes) / (tasks + base_tasks)
    var = pooled * (1 - pooled) * (1 / tasks + 1 / base_tasks)
    if var <= 0:
        return None
    z = (p1 - p2) / math.sqrt(var)
    return 0.5 * math.erfc(-z / math.sqrt(2))  # P(Z <= z)


Tokens = Sequence[int | str]
Token = int | str
# Per prompt, per output position: the server's top-k (token, log-probability) pairs, best first.
TopLogprobs = tuple[tuple[tuple[tuple[Token, float], ...], ...], ...]

# A first divergence whose margin (the baseline's log-probability of its own token minus that of
# the candidate's token, at the same prefix) is below this many nats is a near-tie that rounding
# can flip; at or above it, a clear change. The default holds when the baseline's restarts give
# nothing to calibrate from; docs/correctness-probe.md says where the figure comes from.
DEFAULT_TIE_MARGIN: Final = 0.5
# Calibration never raises the threshold beyond this: a clear change stays detectable even on a
# machine whose baseline restarts disagree widely.
MAX_TIE_MARGIN: Final = 2.0
# Calibrated threshold = this many times the largest margin seen where two baseline starts
# diverged (those divergences are rounding by construction).
CALIBRATION_FACTOR: Final = 2.0
# "Divergence that starts early in many prompts": before this output position ...
EARLY_TOKENS: Final = 4
# ... in at least this share of the prompts (near-ties included) is breakage, not rounding.
EARLY_SHARE: Final = 0.5
# Clear divergences in at least this many prompts (and at least 1/8 of them) flag a config; one
# prompt alone could be a rounding flip a little beyond the threshold.
MIN_CLEAR_PROMPTS: Final = 2


class ProbeAnswers(tuple[tuple[Token, ...], ...]):
    """A server's greedy answers (token ids per prompt), with their log-probabilities.

    It is a tuple of answers, so code that compares answers keeps working; `top` (per prompt,
    per position, the top-k (token, log-probability) pairs) travels with it, so any caller that
    passes a probe's `.outputs` to `judge_outputs` gets the first-divergence judgement.
    `tie_margin` is the default threshold in force when the probe ran (stored with every trial).
    """

    top: TopLogprobs | None
    tie_margin: float

    def __new__(
        cls,
        outputs: Iterable[Iterable[Token]],
        top: TopLogprobs | None = None,
        tie_margin: float = DEFAULT_TIE_MARGIN,
    ) -> ProbeAnswers:
        self = super().__new__(cls, (tuple(o) for o in outputs))
        self.top = top
        self.tie_margin = tie_margin
        return self


def _top(answers: Sequence[Tokens]) -> TopLogprobs | None:
    top = getattr(answers, "top", None)
    return top if top else None


@dataclass(frozen=True)
class Divergence:
    """Where one prompt's candidate answer first left the baseline's, and by how much."""

    prompt: int
    position: int  # output position of the first different token
    baseline_token: Token | None  # None: the baseline's answer ended there
    candidate_token: Token | None  # None: the candidate's answer ended there
    # The baseline's log-probability of its own token minus that of the candidate's token at the
    # divergence (same prefix on both sides); None: no log-probabilities to judge by.
    margin: float | None
    # True: the candidate's token is outside the baseline's top-k, so `margin` is a lower bound.
    margin_is_bound: bool = False
    # The candidate's own view: its log-probability of its token minus that of the baseline's.
    candidate_margin: float | None = None
    kind: str = "unjudged"  # "near_tie" | "clear" | "unjudged" (set by `judge_outputs`)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form, for export and report."""
        return {
            "prompt": self.prompt,
            "position": self.position,
            "baseline_token": self.baseline_token,
            "candidate_token": self.candidate_token,
            "margin": None if self.margin is None else round(self.margin, 4),
            "margin_is_bound": self.margin_is_bound,
            "candidate_margin": None
            if self.candidate_margin is None
            else round(self.candidate_margin, 4),
            "kind": self.kind,
        }


def _logprob(entries: Sequence[tuple[Token, float]], token: Token | None) -> float | None:
    for entry_token, logprob in entries:
        if entry_token == token:
            return float(logprob)
    return None


def first_divergences(reference: Sequence[Tokens], other: Sequence[Tokens]) -> list[Divergence]:
    """Each prompt whose answers differ: its first different position and the margin there.

    The margin comes from the reference's log-probabilities (`ProbeAnswers.top`); with none it
    is None. Prompts answered identically are left out.
    """
    ref_top, other_top = _top(reference), _top(other)
    out = []
    for i, (a, b) in enumerate(zip(reference, other, strict=False)):
        k = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if k is None:
            if len(a) == len(b):
                continue
            k = min(len(a), len(b))
        base_tok = a[k] if k < len(a) else None
        cand_tok = b[k] if k < len(b) else None
        margin: float | None = None
        bound = False
        entries = _position(ref_top, i, k)
        if entries and cand_tok is not None:
            best = float(entries[0][1])
            own = _logprob(entries, base_tok)
            best = own if own is not None else best
            theirs = _logprob(entries, cand_tok)
            if theirs is None:  # outside the top-k: at least as far as the last one listed
                theirs, bound = float(entries[-1][1]), True
            margin = max(0.0, best - theirs)
        cand_margin = None
        cand_entries = _position(other_top, i, k)
        if cand_entries and base_tok is not None:
            mine = _logprob(cand_entries, cand_tok)
            theirs_c = _logprob(cand_entries, base_tok)
            if mine is not None and theirs_c is not None:
                cand_margin = mine - theirs_c
        out.append(Divergence(i, k, base_tok, cand_tok, margin, bound, cand_margin))
    return out


def _position(top: TopLogprobs | None, prompt: int, k: int) -> Sequence[tuple[Token, float]]:
    if top is None or prompt >= len(top) or k >= len(top[prompt]):
        return ()
    return top[prompt][k]


def match_rates(reference: Sequence[Tokens], other: Sequence[Tokens]) -> list[float]:
    """Per prompt, the share of tokens equal from the start until the first difference.

    Greedy decoding makes every token after a first difference differ too, so the common
    prefix over the longer answer is the measure; two empty answers match fully.
    """
    rates = []
    for a, b in zip(reference, other, strict=False):
        longest = max(len(a), len(b))
        same = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            same += 1
        rates.append(same / longest if longest else 1.0)
    return rates


@dataclass(frozen=True)
class OutputCheck:
    """A candidate's greedy answers against the baseline's, and the baseline-vs-baseline floor."""

    match: float  # mean match rate, candidate vs baseline
    floor: float | None  # mean match rate, second baseline start vs first; None: not measured
    gap_high: float | None  # upper bound of mean(candidate - floor) per prompt
    changes_outputs: bool
    prompts: int
    # The first-divergence judgement (None: no log-probabilities, the floor rule decided).
    tie_margin: float | None = None  # the threshold used, in nats
    calibrated: bool = False  # True: raised from the default by baseline restarts' divergences
    divergences: tuple[Divergence, ...] = field(default=())
    reason: str | None = None  # why flagged, in words; None when not flagged

    @property
    def judged_by_logprobs(self) -> bool:
        """True when the first-divergence rule decided (the answers carried log-probabilities)."""
        return self.tie_margin is not None

    def describe(self) -> str:
        """e.g. "token match 0.81; 3/16 prompts diverge, all near-ties (margin <= 0.13 <
        0.50 nats): rounding, not a change"."""
        if self.tie_margin is not None:
            return f"token match {self.match:.2f}; " + self._divergence_words()
        if self.floor is None:
            return f"token match {self.match:.2f} (no second baseline start: no floor)"
        verdict = "changes outputs" if self.changes_outputs else "within the floor"
        return f"token match {self.match:.2f} vs floor {self.floor:.2f}: {verdict}"

    def _divergence_words(self) -> str:
        n = len(self.divergences)
        if n == 0:
            return f"all {self.prompts} prompts answered identically"
        threshold = f"{self.tie_margin:.2f} nats" + (" (calibrated)" if self.calibrated else "")
        if self.changes_outputs:
            return f"changes outputs: {self.reason} (near-tie threshold {threshold})"
        margins = [d.margin for d in self.divergences if d.margin is not None]
        largest = f"margin <= {max(margins):.2f} < " if margins else "margin under "
        return (
            f"{n}/{self.prompts} prompts diverge, at near-ties ({largest}{threshold}): "
            "rounding, not a change"
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form with every prompt's first divergence (for export and report)."""
        return {
            "match": round(self.match, 4),
            "floor": None if self.floor is None else round(self.floor, 4),
            "changes_outputs": self.changes_outputs,
            "prompts": self.prompts,
            "tie_margin": self.tie_margin,
            "calibrated": self.calibrated,
            "reason": self.reason,
            "divergences": [d.to_json() for d in self.divergences],
            "verdict": self.describe(),
        }


# "Clearly below the floor": the paired upper bound is below 0 and the mean gap is at least
# this much, so a one-token wobble on one prompt is not called a changed output.
MIN_GAP = 0.05


def calibrate_tie_margin(
    reference: Sequence[Tokens], restarts: Sequence[Sequence[Tokens]], default: float
) -> tuple[float, bool]:
    """The near-tie threshold: the default, raised where baseline restarts diverged wider.

    Where two starts of the same baseline diverge, the margin there is rounding by construction;
    the threshold becomes `CALIBRATION_FACTOR` times the largest such margin when that exceeds
    the default, never beyond `MAX_TIE_MARGIN`. Returns (threshold, raised by calibration).
    """
    seen = [
        d.margin
        for other in restarts
        for d in first_divergences(reference, other)
        if d.margin is not None
    ]
    if not seen:
        return default, False
    wanted = min(MAX_TIE_MARGIN, CALIBRATION_FACTOR * max(seen))
    return (wanted, True) if wanted > default else (default, False)


def judge_outputs(
    baseline: Sequence[Tokens],
    candidate: Sequence[Tokens],
    *more_baselines: Sequence[Tokens],
    resamples: int = 2000,
    seed: int = 0,
    tie_margin: float | None = None,
) -> OutputCheck:
    """Did the candidate change the baseline's greedy answers, or only round differently?

    With log-probabilities on the baseline's answers (`ProbeAnswers.top`, as the probe records
    them), each prompt's first divergence is judged: a margin under the near-tie threshold is
    rounding; the candidate is flagged when clear margins appear in at least
    `MIN_CLEAR_PROMPTS` prompts (and 1/8 of them), or when at least `EARLY_SHARE` of the
    prompts diverge within their first `EARLY_TOKENS` tokens. Without log-probabilities the
    candidate's token match is tested against the floor of baseline restarts.

    Args:
        baseline: The baseline's answers (the reference).
        candidate: The candidate's answers, same prompts.
        *more_baselines: Answers of later starts of the baseline server: they calibrate the
            near-tie threshold, and each prompt's floor is their mean match with the reference.
            Without any, the default threshold holds and the floor rule flags nothing.
        resamples: Bootstrap resamples over the prompts (floor rule).
        seed: Seed of the resampling.
        tie_margin: The default near-tie threshold in nats; None: the one stored with the
            baseline's answers, else `DEFAULT_TIE_MARGIN`.
    """
    baseline = getattr(baseline, "outputs", baseline)
    candidate = getattr(candidate, "outputs", candidate)
    more_baselines = tuple(getattr(b, "outputs", b) for b in more_baselines)
    cand = match_rates(baseline, candidate)
    match = sum(cand) / len(cand) if cand else 1.0
    floor_check = _floor_rule(baseline, candidate, more_baselines, cand, match, resamples, seed)
    if _top(baseline) is None or not cand:
        return floor_check
    default = tie_margin if tie_margin is not None else getattr(baseline, "tie_margin", None)
    threshold, calibrated = calibrate_tie_margin(
        baseline, more_baselines, DEFAULT_TIE_MARGIN if default is None else float(default)
    )
    divergences = tuple(
        replace(d, kind=_kind(d, threshold)) for d in first_divergences(baseline, candidate)
    )
    reason = _breakage(divergences, len(cand))
    return replace(
        floor_check,
        changes_outputs=reason is not None,
        tie_margin=threshold,
        calibrated=calibrated,
        divergences=divergences,
        reason=reason,
    )


def _kind(d: Divergence, threshold: float) -> str:
    if d.margin is None:
        return "unjudged"
    return "clear" if d.margin >= threshold else "near_tie"


def _breakage(divergences: Sequence[Divergence], prompts: int) -> str | None:
    """Why these first divergences are breakage, in words; None when they are rounding."""
    clear = [d for d in divergences if d.kind == "clear"]
    if len(clear) >= max(MIN_CLEAR_PROMPTS, math.ceil(prompts / 8)):
        low = min(d.margin for d in clear if d.margin is not None)
        return (
            f"{len(clear)}/{prompts} prompts diverge at a clear margin "
            f"(the smallest {low:.2f} nats)"
        )
    early = [d for d in divergences if d.position < EARLY_TOKENS]
    if early and len(early) >= EARLY_SHARE * prompts:
        return f"{len(early)}/{prompts} prompts diverge within their first {EARLY_TOKENS} tokens"
    return None


def _floor_rule(
    baseline: Sequence[Tokens],
    candidate: Sequence[Tokens],
    more_baselines: Sequence[Sequence[Tokens]],
    cand: list[float],
    match: float,
    resamples: int,
    seed: int,
) -> OutputCheck:
    """The token-match rule: is the candidate's match clearly below the floor of restarts?"""
    del candidate
    if not more_baselines or not cand:
        return OutputCheck(match, None, None, False, len(cand))
    per_start = [match_rates(baseline, other) for other in more_baselines]
    floor_rates = [sum(rates) / len(rates) for rates in zip(*per_start, strict=True)]
    diffs = [c - f for c, f in zip(cand, floor_rates, strict=False)]
    floor = sum(floor_rates) / len(floor_rates)
    rng = random.Random(seed)
    means = [sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(resamples)]
    high = percentile(means, 97.5)
    assert high is not None
    mean_gap = sum(diffs) / len(diffs)
    flagged = high < 0 and -mean_gap >= MIN_GAP
    return OutputCheck(match, floor, high, flagged, len(cand))
