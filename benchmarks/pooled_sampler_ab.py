"""One-off: would a sampler on tuner's pooled additive model (`tuner.metrics.pooled`) find a
better config than TPE at a quarter of the grid's total cost?

Each search runs `tuner optimize --budget`'s replayed study (`_se_budget.run_budgeted`: the
shipped loop, screening, plan, floor start and confirmation stage) at 25% of the grid's total
cost, split 0.7, run noise 5%, over seeds `--seeds A,B` (seed s in posterior draw s); only the
sampler differs. The pooled samplers fit the module's model (knob effects + a per-config
departure + run noise, empirical Bayes) to the search's complete and screened-out runs (a
screened-out run at its last reported rate) over every config of the space, after TPE's own
number of random start-up draws, and pick among the configs not yet taken: `ts` one draw of
the joint posterior (Thompson sampling), `ei` expected improvement over the best run config's
posterior mean, `ucb` mean + 1 sd, `mean` the posterior mean alone. Prints each search's median
and mean regret, its floor (the best config it completed a run of) and its mean regret minus
TPE's, paired by seed with a bootstrap 95% interval. Replay: load shape, not graded answers.

    python -m benchmarks.pooled_sampler_ab [--seeds 0,100] [--searches tpe,random,ts,ei,ucb,mean]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import warnings
from typing import Any

import numpy as np
import optuna
from optuna.samplers import BaseSampler
from optuna.trial import TrialState
from scipy.stats import norm

from benchmarks import _se_budget as budget
from benchmarks._grid_replay import LARGE_DATA, GridTable
from benchmarks._se_replay import DEFAULT, RANDOM_DEFAULT, Search
from benchmarks.grid_truth import load_draws, truth_path
from benchmarks.sample_efficiency import measured_noise
from tuner.metrics import DEFAULT_NOISE
from tuner.metrics.pooled import (
    _CONFIG_SDS,
    _EFFECT_SDS,
    _INTERCEPT_SD,
    _NOISE_SCALES,
    _design,
    _posterior,
    pooled_key,
)
from tuner.study.search.sampling import enumerate_space, startup_trials
from tuner.study.space import config_key

TOTAL, SPLIT, NOISE = 0.25, 0.7, 0.05


def space_posterior(
    space: list[dict[str, Any]], runs: list[tuple[dict[str, Any], float]], base: dict[str, Any]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The pooled model's posterior mean and covariance of every config of the space."""
    keys = [pooled_key(c) for c in space]
    x, _ = _design(space, base)
    n, e = len(space), x.shape[1]
    c = np.hstack([np.ones((n, 1)), x, np.eye(n)])
    z = c[[keys.index(pooled_key(p)) for p, _ in runs]]
    y = np.array([math.log(v) for _, v in runs])
    center = float(y.mean())
    noise = DEFAULT_NOISE.log_sd / math.sqrt(2)
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for s, tau, scale in itertools.product(_EFFECT_SDS, _CONFIG_SDS, _NOISE_SCALES):
        prior = np.concatenate(
            [[_INTERCEPT_SD**2], np.full(e, s * s), np.full(n, max(tau, 1e-4) ** 2)]
        )
        mean, cov, loglik = _posterior(z, y - center, prior, (noise * scale) ** 2)
        if best is None or loglik > best[0]:
            best = (loglik, mean, cov)
    assert best is not None
    return keys, c @ best[1] + center, c @ best[2] @ c.T


def _rate(t: optuna.trial.FrozenTrial) -> float | None:
    if t.state == TrialState.COMPLETE:
        return t.value
    if t.state == TrialState.PRUNED and t.intermediate_values:
        return t.intermediate_values[max(t.intermediate_values)]
    return None


class PooledSampler(BaseSampler):
    """Picks a whole config from the pooled posterior, then answers each param from it."""

    def __init__(self, space: list[dict[str, Any]], base: dict[str, Any], seed: int | None,
                 startup: int, mode: str) -> None:  # fmt: skip
        self.space, self.base, self.mode, self.startup = space, base, mode, startup
        self.rng = np.random.default_rng(seed)
        self.fallback = optuna.samplers.RandomSampler(seed=seed)
        self.picks: dict[int, dict[str, Any] | None] = {}

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, space: Any) -> dict[str, Any]:
        return {}

    def _pick(self, study: optuna.Study) -> dict[str, Any] | None:
        trials = study.get_trials(deepcopy=False)
        runs = [(dict(t.params), r) for t in trials if (r := _rate(t)) is not None and r > 0]
        if len(runs) < self.startup:
            return None
        keys, m, cov = space_posterior(self.space, runs, self.base)
        taken = {pooled_key(dict(t.params)) for t in trials if t.params}
        free = [i for i, k in enumerate(keys) if k not in taken]
        if not free:
            return None
        sd = np.sqrt(np.clip(np.diag(cov), 1e-12, None))
        if self.mode == "ts":
            score = m + np.linalg.cholesky(
                cov + 1e-9 * np.eye(len(keys))
            ) @ self.rng.standard_normal(len(keys))
        elif self.mode == "ucb":
            score = m + sd
        elif self.mode == "ei":
            top = max(m[keys.index(pooled_key(p))] for p, _ in runs)
            z = (m - top) / sd
            score = (m - top) * norm.cdf(z) + sd * norm.pdf(z)
        else:
            score = m
        return self.space[max(free, key=lambda i: score[i])]

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        if trial.number not in self.picks:
            self.picks[trial.number] = self._pick(study)
        pick = self.picks[trial.number]
        if pick is None or name not in pick:
            return self.fallback.sample_independent(study, trial, name, dist)
        return pick[name]


def pooled_search(mode: str, table: GridTable) -> Search:
    space = enumerate_space(table.preset) or []
    base = table.preset.baseline_params()

    def factory(seed: int | None, n_trials: int) -> BaseSampler:
        return PooledSampler(space, base, seed, startup_trials(n_trials), mode)

    return Search(f"pooled {mode}", factory, DEFAULT.prune)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,100", help="first and one past the last seed")
    parser.add_argument("--searches", default="tpe,random,ts,ei,ucb,mean")
    args = parser.parse_args()
    lo, hi = map(int, args.seeds.split(","))
    table = GridTable.load(LARGE_DATA)
    keys, mu = load_draws(truth_path(LARGE_DATA))
    _, drifts = measured_noise(truth_path(LARGE_DATA))
    base = config_key(table.preset.baseline_params())
    worlds = [dict(zip(keys, map(float, mu[s % len(mu)]), strict=True)) for s in range(hi)]
    budget.init(str(LARGE_DATA), worlds, (NOISE,), drifts)
    warnings.simplefilter("ignore")
    fixed = {"tpe": DEFAULT, "random": RANDOM_DEFAULT}
    out: dict[str, list[dict[str, Any]]] = {}
    print(f"25% total, split {SPLIT}, noise {NOISE:.0%}, seeds {lo}-{hi - 1}")
    print("| search | regret median | regret mean | floor median | mean - TPE's (95%) |")
    print("|---|---|---|---|---|")
    for name in args.searches.split(","):
        search = fixed.get(name) or pooled_search(name, table)
        recs = []
        for seed in range(lo, hi):
            world = budget._WORLDS[NOISE][seed % len(worlds)]
            run = budget.run_budgeted(world, search, seed, TOTAL, SPLIT)
            recs.append(budget.record((0, TOTAL, SPLIT, NOISE, seed), run, base, keys, mu))
        out[name] = recs
        reg = [r["regret"] for r in recs]
        diff = ""
        if name != "tpe" and "tpe" in out:
            d = budget.paired_diff(recs, out["tpe"])
            lo_d, hi_d = (x * 100 for x in d["interval"])
            diff = f"{d['diff'] * 100:+.1f} points ({lo_d:+.1f} to {hi_d:+.1f})"
        floor = statistics.median(r["floor"] for r in recs)
        med, mean = statistics.median(reg), sum(reg) / len(reg)
        print(f"| {name} | {med:.1%} | {mean:.1%} | {floor:.1%} | {diff} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
