"""The score: successful tasks per hour with a bootstrap interval, and the latency figures.

tasks/hour = successes x 3600 / scored wall time. Its 95% interval resamples tasks (outcome and
duration together, seeded); it describes the spread inside one run (the task mix), never the
spread between runs. A resample's wall time is the measured wall time scaled by the makespan
of its tasks on the run's agents (`makespan`: several agents run at once, so the window is
the busiest agent's, not the sum of the task-seconds). Success rate has a Wilson interval;
TTFT, TPOT and ITL get p50/p90/p99; energy is divided per successful task and per output token
only when it was measured.

Comparisons between configs are paired and the ROUND is the unit of evidence
(`paired_ratio`): a round is one fresh start of each compared config; its paired log ratio is
the candidate's tasks/h over the same round's baseline tasks/h, on the task ids both played.
The interval is a t-interval over the rounds' log ratios whose variance pools the rounds'
own spread with the preset's recorded run-to-run noise (`BetweenRunNoise`, measured from
repeated fresh starts; its degrees of freedom weigh it). With one round the interval is the
between-run term alone: one run cannot show how much a whole run moves. `holm` corrects a set
of one-sided tests for their number.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tuner.records import Score, TaskRecord

__all__ = [
    "DEFAULT_NOISE",
    "BetweenRunNoise",
    "PairedEstimate",
    "RunOutcomes",
    "Score",
    "bootstrap_tasks_per_hour",
    "combine_noise",
    "f_sf",
    "holm",
    "makespan",
    "noise_for_study",
    "paired_ratio",
    "percentile",
    "score_tasks",
    "student_t_cdf",
    "student_t_quantile",
    "wilson_interval",
]

Z95 = 1.959963984540054


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear interpolation (numpy's default); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a success rate (0, 0 interval bounds for no trials)."""
    if trials <= 0:
        return (0.0, 0.0)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_tasks_per_hour(
    outcomes: Sequence[bool],
    durations: Sequence[float],
    wall_s: float,
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    agents: int = 1,
) -> tuple[float, float]:
    """Percentile bootstrap interval of successes x 3600 / wall time, resampling tasks.

    This is the spread inside one run (which tasks, how long each took), not between runs.

    Args:
        outcomes: Success of each scored task.
        durations: Wall seconds of each task (same order).
        wall_s: The scored window's wall time.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling (the interval is reproducible).
        confidence: Coverage of the interval.
        agents: Agents that ran the tasks at once: a resample's window is the measured one
            scaled by its tasks' makespan on that many agents over the measured tasks'.

    Returns:
        (low, high) in tasks per hour; (0, 0) without tasks or time.
    """
    n = len(outcomes)
    if n == 0 or wall_s <= 0:
        return (0.0, 0.0)
    full = makespan(durations, agents)
    rng = random.Random(seed)
    indices = range(n)
    rates: list[float] = []
    for _ in range(resamples):
        picks = rng.choices(indices, k=n)
        wins = sum(1 for i in picks if outcomes[i])
        share = makespan([durations[i] for i in picks], agents) / full if full > 0 else 1.0
        rates.append(wins * 3600.0 / (wall_s * share) if share > 0 else 0.0)
    tail = (1 - confidence) / 2 * 100
    low, high = percentile(rates, tail), percentile(rates, 100 - tail)
    assert low is not None and high is not None
    return (low, high)


def makespan(durations: Sequence[float], agents: int = 1) -> float:
    """Seconds until `agents` agents, each taking the next task when free, finish the tasks
    in order (with one agent: their sum)."""
    if agents <= 1 or len(durations) <= 1:
        return float(sum(durations))
    free = [0.0] * min(agents, len(durations))
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def score_tasks(
    tasks: Sequence[TaskRecord],
    wall_s: float,
    *,
    itl_s: Sequence[float] = (),
    energy_joules: float | None = None,
    seed: int = 0,
    resamples: int = 2000,
    agents: int = 1,
) -> Score:
    """Score the scored tasks of a run.

    Args:
        tasks: Scored task records (warm-up tasks are left out by the caller).
        wall_s: Wall time of the scored window.
        itl_s: Gaps between streamed chunks of the scored steps.
        energy_joules: Energy over the window, None when not measured.
        seed: Seed of the bootstrap.
        resamples: Bootstrap resamples.
        agents: Agents that ran the tasks at once (the bootstrap's window scaling).
    """
    successes = sum(1 for t in tasks if t.success)
    rate = successes * 3600.0 / wall_s if wall_s > 0 else 0.0
    low, high = bootstrap_tasks_per_hour(
        [t.success for t in tasks], [t.wall_s for t in tasks], wall_s,
        resamples=resamples, seed=seed, agents=agents,
    )  # fmt: skip
    s_low, s_high = wilson_interval(successes, len(tasks))
    steps = [s for t in tasks for s in t.steps]
    ttfts = [s.ttft_s for s in steps if s.ttft_s is not None]
    tpots = [
        (s.latency_s - s.ttft_s) / (s.output_tokens - 1)
        for s in steps
        if s.ttft_s is not None and s.output_tokens > 1
    ]
    output_tokens = sum(s.output_tokens for s in steps)
    per_task = per_token = None
    if energy_joules is not None:
        per_task = energy_joules / successes if successes else None
        per_token = energy_joules / output_tokens if output_tokens else None
    return Score(
        tasks=len(tasks),
        successes=successes,
        scored_wall_s=wall_s,
        tasks_per_hour=rate,
        tasks_per_hour_low=low,
        tasks_per_hour_high=high,
        success_rate=successes / len(tasks) if tasks else 0.0,
        success_rate_low=s_low,
        success_rate_high=s_high,
        ttft_p50=percentile(ttfts, 50),
        ttft_p90=percentile(ttfts, 90),
        ttft_p99=percentile(ttfts, 99),
        tpot_p50=percentile(tpots, 50),
        tpot_p90=percentile(tpots, 90),
        tpot_p99=percentile(tpots, 99),
        itl_p50=percentile(itl_s, 50),
        itl_p90=percentile(itl_s, 90),
        itl_p99=percentile(itl_s, 99),
        output_tokens_per_s=output_tokens / wall_s if wall_s > 0 else None,
        energy_joules=energy_joules,
        joules_per_task=per_task,
        joules_per_token=per_token,
    )


@dataclass(frozen=True)
class RunOutcomes:
    """One scored run as the paired comparison needs it: task id -> (success, seconds)."""

    outcomes: tuple[tuple[str, bool, float], ...]  # (task_id, success, wall seconds)
    wall_s: float
    agents: int = 1  # agents that ran the tasks at once

    @classmethod
    def of(cls, tasks: Sequence[TaskRecord], wall_s: float, agents: int = 1) -> RunOutcomes:
        """From a run's scored task records (warm-up tasks are dropped here)."""
        kept = tuple((t.task_id, t.success, t.wall_s) for t in tasks if not t.warmup)
        return cls(kept, wall_s, agents)

    @property
    def tasks_per_hour(self) -> float:
        """Successes x 3600 / wall time."""
        wins = sum(1 for _, ok, _ in self.outcomes if ok)
        return wins * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    def only(self, ids: set[str]) -> RunOutcomes:
        """The run restricted to task ids `ids`, its window scaled to their makespan's share."""
        kept = tuple(o for o in self.outcomes if o[0] in ids)
        if len(kept) == len(self.outcomes):
            return self
        full = makespan([o[2] for o in self.outcomes], self.agents)
        share = makespan([o[2] for o in kept], self.agents) / full if full > 0 else 1.0
        return RunOutcomes(kept, self.wall_s * share, self.agents)


@dataclass(frozen=True)
class BetweenRunNoise:
    """How much one round's paired log ratio moves between fresh starts, as measured.

    `log_sd` is the standard deviation of log(candidate tasks/h / baseline tasks/h) of one
    round, from repeated fresh starts of the same configs; `df` its degrees of freedom (how
    many repeats stand behind it). A study stores the value it used
    (`tuner.attrs.StudyAttr.BETWEEN_RUN_NOISE`) so its verdicts can be recomputed.
    """

    log_sd: float
    df: int
    source: str
    # When the value is a prior updated by a study's own repeats: the prior's sd and df.
    prior_sd: float | None = None
    prior_df: int | None = None

    def to_json(self) -> dict[str, Any]:
        """As stored on the study."""
        return {"log_sd": self.log_sd, "df": self.df, "source": self.source}

    def describe(self) -> str:
        """e.g. "run-to-run sd 0.041 of the log ratio over 14 df: prior 0.034 (10 df, ...)
        with this study's 3 rounds (2 df)"."""
        if self.prior_sd is None or self.prior_df is None:
            return f"run-to-run sd {self.log_sd:.3f} of the log ratio ({self.df} df, {self.source})"
        head, _, own = self.source.partition("; with ")
        return (
            f"run-to-run sd {self.log_sd:.3f} of the log ratio over {self.df} df: the prior "
            f"{self.prior_sd:.3f} ({self.prior_df} df, {head}) with {own} "
            f"({self.df - self.prior_df} df)"
        )

    @classmethod
    def from_json(cls, value: object) -> BetweenRunNoise | None:
        """From `to_json`'s dict; None when absent or malformed."""
        if not isinstance(value, Mapping):
            return None
        sd, df = value.get("log_sd"), value.get("df")
        if not isinstance(sd, int | float) or not isinstance(df, int) or sd <= 0 or df < 1:
            return None
        return cls(float(sd), int(df), str(value.get("source") or "stored with the study"))


# The prior of a round's paired log ratio on a machine tuner has not measured: sqrt(2) x the
# between-start sd of log tasks/h pooled over every recorded CPU start, after each session's
# drift (0.046 over 16 df: benchmarks/noise_model.py, benchmarks/data/noise-model.json). Its
# weight is 2 df, not 16: the recorded machines differ about 4x (0.015 on one, 0.063 on the
# other), which a scaled inverse chi-square prior only covers with a few df; a study's own
# rounds soon outweigh it (`combine_noise`). Chosen with benchmarks/decision_sim.py
# (docs/decision-sim.md, docs/decisions.md).
DEFAULT_NOISE = BetweenRunNoise(
    log_sd=0.065,
    df=2,
    source="every recorded CPU start, pooled over machines (docs/decision-sim.md)",
)


def _betacf(a: float, b: float, x: float) -> float:
    # Continued fraction of the regularized incomplete beta (Lentz's method).
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-12:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def f_sf(f: float, d1: int, d2: int) -> float:
    """P(F > f) for Fisher's F with (d1, d2) degrees of freedom."""
    if f <= 0:
        return 1.0
    return _betai(d2 / 2, d1 / 2, d2 / (d2 + d1 * f))


def combine_noise(prior: BetweenRunNoise, squares: float, df: int, what: str) -> BetweenRunNoise:
    """The prior between-run noise updated by a study's own repeats (conjugate).

    A scaled inverse chi-square prior on the variance of a round's log ratio, scale s0^2 over
    d0 degrees of freedom (the recorded repeats), updated by `squares` (the study's own sum of
    squared deviations on that scale) over `df` degrees of freedom, is again one: scale
    (d0 s0^2 + squares) / (d0 + df) over d0 + df. Every own repeat moves it, by its weight;
    none switches the prior off (the all-or-nothing F-test it replaces saw too little with
    2 df and, when it fired, threw the 10 recorded df away).
    """
    if df <= 0:
        return prior
    total = prior.df + df
    sd = math.sqrt((prior.df * prior.log_sd**2 + squares) / total)
    head = prior.source.split("; with ")[0]
    return BetweenRunNoise(
        sd,
        total,
        f"{head}; with {what}",
        prior_sd=prior.prior_sd if prior.prior_sd is not None else prior.log_sd,
        prior_df=prior.prior_df if prior.prior_df is not None else prior.df,
    )


def noise_for_study(recorded: BetweenRunNoise, baseline_tph: Sequence[float]) -> BetweenRunNoise:
    """The recorded between-run noise updated by this study's own baseline starts.

    Two fresh starts of the baseline at different times differ in log tasks/h with the same
    variance as a round's paired log ratio of runs at different times (or more: the machine's
    drift between them adds to it), so m baseline starts give twice their sum of squared
    deviations of log tasks/h over m - 1 df (`combine_noise`).
    """
    logs = [math.log(v) for v in baseline_tph if v > 0]
    m = len(logs)
    if m < 2:
        return recorded
    mean = sum(logs) / m
    squares = 2 * sum((x - mean) ** 2 for x in logs)
    return combine_noise(recorded, squares, m - 1, f"this study's {m} baseline starts")


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer `df` >= 1 (closed form, Abramowitz-Stegun 26.7)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        term, total = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        tail = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        inside = 2 / math.pi * (theta + tail)
    else:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = math.sin(theta) * total
    return 0.5 + math.copysign(inside / 2, t)


def student_t_quantile(p: float, df: int) -> float:
    """The t with `student_t_cdf(t, df) == p` (bisection; 0 < p < 1)."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    low, high = -1e6, 1e6
    for _ in range(200):
        mid = (low + high) / 2
        if student_t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-10:
            break
    return (low + high) / 2


@dataclass(frozen=True)
class PairedEstimate:
    """Candidate tasks/h over the baseline's, one paired ratio per round, with its interval.

    `ratio` is the geometric mean of the rounds' paired ratios; the interval is a t-interval
    on their log ratios whose variance pools the rounds' spread with the recorded between-run
    noise (`noise`); `p_value` is the one-sided p of "not faster" (ratio <= 1).
    """

    ratio: float
    low: float
    high: float
    rounds: int
    tasks: int
    p_value: float = 1.0
    df: int = 0
    noise: BetweenRunNoise = DEFAULT_NOISE
    round_ratios: tuple[float, ...] = ()
    level: float | None = None  # the one-sided level it was tested at, when sequential
    # Rounds (indices into `round_ratios`) left out of the estimate as outliers against the
    # others' spread (`outlier_rounds`): a slow start. `rounds` still counts them.
    set_aside: tuple[int, ...] = ()

    @property
    def used(self) -> int:
        """The rounds the estimate and interval stand on (`rounds` less the set-aside)."""
        return self.rounds - len(self.set_aside)

    @property
    def beats(self) -> bool:
        """The whole interval is above 1 (one test alone; a study corrects for several)."""
        return self.low > 1.0

    @property
    def loses(self) -> bool:
        """The whole interval is below 1."""
        return self.high < 1.0

    def upper(self, level: float) -> float:
        """The one-sided upper confidence bound of the ratio at `level` (e.g. 0.05: the ratio
        is below it with 95% confidence), from the same t distribution as the interval."""
        if self.used < 1 or self.df < 1:
            return math.inf
        se = self.noise.log_sd / math.sqrt(self.used)
        return math.exp(math.log(self.ratio) + student_t_quantile(1 - level, self.df) * se)

    def describe(self) -> str:
        """e.g. "x1.12 [1.05, 1.19] over 3 rounds of 12 tasks (...between-run...)"."""
        rounds = f"{self.rounds} round{'s' if self.rounds != 1 else ''}"
        interval = f"[{self.low:.3f}, {self.high:.3f}]"
        sd = self.noise.describe()
        if self.rounds == 1:
            how = f"one round, so the interval is the between-run term: {sd}"
        else:
            how = f"interval over the rounds, with the between-run term: {sd}"
        level = f", tested at one-sided {self.level:.2g}" if self.level is not None else ""
        aside = ""
        if self.set_aside:
            shown = ", ".join(
                f"round {i + 1} (x{self.round_ratios[i]:.3f})" for i in self.set_aside
            )
            aside = (
                f" ({shown} set aside: more than {OUTLIER_T:g} predictive sds from the other "
                "rounds, a slow start)"
            )
        return (
            f"x{self.ratio:.3f} {interval} over {rounds} of {self.tasks} tasks{aside}{level}; {how}"
        )


# A round's log ratio is set aside when it lies more than OUTLIER_T sds of the prediction
# from the other rounds (their mean; the prior updated by their spread, times
# sqrt(1 + 1/n)), from OUTLIER_FROM rounds on and at most one round in OUTLIER_SHARE.
# Why: one slow start (a start at x0.75, which shared boxes have) moved a round by 0.29 in
# log ratio; left in, it widened the interval of every later look and cost a true +10% a
# quarter of its power (benchmarks/decision_sim.py, docs/decision-sim.md).
OUTLIER_T: Final = 3.5
OUTLIER_FROM: Final = 4
OUTLIER_SHARE: Final = 5


def outlier_rounds(logs: Sequence[float], noise: BetweenRunNoise) -> tuple[int, ...]:
    """Rounds to leave out of a paired estimate: one at a time, the round furthest from the
    others (in sds of the prediction from the others, with `noise` as the prior updated by
    their spread) while it is more than `OUTLIER_T` away, from `OUTLIER_FROM` rounds on, at
    most one in `OUTLIER_SHARE` rounds. Symmetric: a round too high is set aside as a round
    too low is (a slow baseline start reads as a fast candidate)."""
    r = len(logs)
    if r < OUTLIER_FROM:
        return ()
    kept = list(range(r))
    out: list[int] = []
    for _ in range(r // OUTLIER_SHARE):
        worst: tuple[float, int] | None = None
        for j in kept:
            others = [logs[i] for i in kept if i != j]
            n = len(others)
            mean = sum(others) / n
            squares = sum((x - mean) ** 2 for x in others)
            sd = math.sqrt((noise.df * noise.log_sd**2 + squares) / (noise.df + n - 1))
            z = abs(logs[j] - mean) / (sd * math.sqrt(1 + 1 / n))
            if worst is None or z > worst[0]:
                worst = (z, j)
        if worst is None or worst[0] <= OUTLIER_T:
            break
        kept.remove(worst[1])
        out.append(worst[1])
    return tuple(sorted(out))


def paired_ratio(
    candidate: Sequence[RunOutcomes],
    baseline: Sequence[RunOutcomes],
    *,
    noise: BetweenRunNoise = DEFAULT_NOISE,
    confidence: float = 0.95,
) -> PairedEstimate | None:
    """Per-round paired ratios of tasks/h and a t-interval over the rounds.

    Run i of the candidate is paired with run i of the baseline (the same round); within a
    round both sides are restricted to the task ids every run played, so the task mix cancels.
    Each round gives log(candidate tasks/h / baseline tasks/h). With R rounds and the prior
    noise (sd s0 over d0 degrees of freedom: the recorded repeats, possibly already updated by
    the study's baseline starts), the variance of one round's log ratio is
    (d0 s0^2 + sum of squared deviations) / (d0 + R - 1) (`combine_noise`, a conjugate update):
    the prior weighs as d0 earlier rounds, so two rounds that happen to agree do not make a
    narrow interval, and rounds that disagree widen it by their weight. The interval is
    mean +- t(d0 + R - 1) x sd / sqrt(R). From `OUTLIER_FROM` rounds on, a round far outside
    the others' spread (`outlier_rounds`: one slow start) is left out of the mean (R counts
    the rounds kept) and counts in the spread as a round at the edge, OUTLIER_T predictive
    sds out.

    Args:
        candidate: The candidate's runs, one per round.
        baseline: The baseline's runs, same rounds, same order.
        noise: The prior between-run noise of a round's log ratio.
        confidence: Coverage of the (two-sided) interval.

    Returns:
        The estimate, or None when there is nothing to pair (no rounds, no common task, or a
        side that completed nothing in some round).
    """
    pairs = list(zip(candidate, baseline, strict=False))
    if not pairs:
        return None
    common = set.intersection(
        *({tid for tid, _, _ in run.outcomes} for pair in pairs for run in pair)
    )
    if not common:
        return None
    logs: list[float] = []
    for c, b in pairs:
        c_rate, b_rate = c.only(common).tasks_per_hour, b.only(common).tasks_per_hour
        if c_rate <= 0 or b_rate <= 0:
            return None
        logs.append(math.log(c_rate / b_rate))
    rounds = len(logs)
    aside = outlier_rounds(logs, noise)
    used = [x for i, x in enumerate(logs) if i not in aside]
    r = len(used)
    mean = sum(used) / r
    squares = sum((x - mean) ** 2 for x in used)
    if aside:
        # A set-aside round leaves the mean but not the spread: it counts as a round at the
        # edge (OUTLIER_T predictive sds out), so setting aside never narrows the interval
        # below what an ordinary extreme round gives (with the round simply dropped, false
        # wins rose to 7.7% at x6 of the fitted noise: docs/decision-sim.md).
        kept = combine_noise(noise, squares, r - 1, "")
        edge = OUTLIER_T * kept.log_sd * math.sqrt(1 + 1 / r)
        squares += len(aside) * edge**2
    what = f"this study's {rounds} rounds" + (f" ({len(aside)} set aside)" if aside else "")
    noise = combine_noise(noise, squares, rounds - 1, what)
    df, sd = noise.df, noise.log_sd
    se = sd / math.sqrt(r)
    t = student_t_quantile(1 - (1 - confidence) / 2, df)
    p = 1.0 - student_t_cdf(mean / se, df) if se > 0 else (0.0 if mean > 0 else 1.0)
    return PairedEstimate(
        ratio=math.exp(mean),
        low=math.exp(mean - t * se),
        high=math.exp(mean + t * se),
        rounds=rounds,
        tasks=len(common),
        p_value=p,
        df=df,
        noise=noise,
        round_ratios=tuple(math.exp(x) for x in logs),
        set_aside=aside,
    )


def holm(p_values: Mapping[int, float], alpha: float = 0.025) -> set[int]:
    """Keys whose one-sided test is rejected by Holm's step-down at family-wise `alpha`.

    The i-th smallest of m p-values must be at most alpha / (m - i); the first that is not
    stops the procedure.
    """
    ordered = sorted(p_values.items(), key=lambda kv: (kv[1], kv[0]))
    m = len(ordered)
    rejected: set[int] = set()
    for i, (key, p) in enumerate(ordered):
        if p > alpha / (m - i):
            break
        rejected.add(key)
    return rejected
