"""Pooled evidence across configs: which of a study's configs is best, from all of its runs.

A config's one search-time run moves by the between-run noise (on the CPU boxes 7-12% of
tasks/h), about as much as the configs differ, so the highest single run is often a lucky
one. The runs of the other configs carry evidence about it too: configs that share a knob
value share that value's effect. `fit_pooled` fits, to every run's log tasks/h,

    log tasks/h = intercept + sum over knobs of effect(knob value) + u(config) + e

with one effect per knob value (the baseline's value is the reference), effects ~ N(0, s^2),
a config's own departure from the additive part u ~ N(0, tau^2), and e ~ N(0, sigma^2) the
between-run noise per start. s, tau and sigma are chosen by the marginal likelihood over a
small grid (empirical Bayes), sigma no lower than the noise given (the study's,
`tuner.results.decision.study_noise`, per paired ratio, so its sd over sqrt(2)): a study's
prior can be several times too small for the box at hand (issue 34: 0.024 per start assumed,
0.07-0.12 seen), and a fit told too small a noise trusts single runs as the raw pick does.
Given them the posterior is Gaussian, exact.

Each config gets its posterior mean and sd of log tasks/h, and its probability of being the
best among the candidates (Monte Carlo over the joint posterior, seeded, so the same trials
rank the same way every time). The confirmation stage confirms the configs most likely to
be best (`tuner.study.stages.confirm_finalists.plan_confirmation`); a config with one high run whose
knob values did badly everywhere else ranks below one whose neighbours agree with it.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PooledConfig", "PooledFit", "fit_pooled", "pooled_key"]

# Empirical-Bayes grids: the sd of one knob value's effect on log tasks/h, and of a config's
# departure from the additive part.
_EFFECT_SDS = (0.03, 0.06, 0.12, 0.25)
_CONFIG_SDS = (0.0, 0.02, 0.05, 0.1, 0.2)
_NOISE_SCALES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_INTERCEPT_SD = 10.0
_DRAWS = 4000
_ABSENT = "-"  # a knob a config does not have (a lookup window without n-gram)


@dataclass(frozen=True)
class PooledConfig:
    """One config's posterior: log tasks/h mean and sd, and P(best among the candidates)."""

    key: str
    params: dict[str, Any]
    runs: int
    raw_mean: float  # the mean of its own runs' log tasks/h
    mean: float
    sd: float
    p_best: float

    @property
    def tasks_per_hour(self) -> float:
        """The posterior mean as tasks/h (the geometric mean's scale)."""
        return math.exp(self.mean)


@dataclass(frozen=True)
class PooledFit:
    """What `fit_pooled` found: every config's posterior and the chosen prior scales."""

    configs: tuple[PooledConfig, ...]
    effect_sd: float
    config_sd: float
    noise_sd: float

    def ranked(self) -> list[PooledConfig]:
        """Candidates first by P(best), then by posterior mean (the baseline is not ranked)."""
        return sorted(
            (c for c in self.configs if not math.isnan(c.p_best)),
            key=lambda c: (-c.p_best, -c.mean, c.key),
        )

    def by_key(self) -> dict[str, PooledConfig]:
        """Each config's posterior by its key."""
        return {c.key: c for c in self.configs}


def pooled_key(params: Mapping[str, Any]) -> str:
    """A config's key in `PooledFit.by_key` (its params as sorted JSON)."""
    return json.dumps(dict(params), sort_keys=True, default=str)


def _design(
    configs: list[dict[str, Any]], reference: Mapping[str, Any]
) -> tuple[np.ndarray, list[str]]:
    """One column per (knob, value) that is not the reference's value, 1 where a config has it."""
    knobs = sorted({k for p in configs for k in p})
    columns: list[tuple[str, str]] = []
    for knob in knobs:
        ref = str(reference.get(knob, _ABSENT))
        values = sorted({str(p.get(knob, _ABSENT)) for p in configs} - {ref})
        columns.extend((knob, v) for v in values)
    x = np.zeros((len(configs), len(columns)))
    for i, p in enumerate(configs):
        for j, (knob, value) in enumerate(columns):
            x[i, j] = 1.0 if str(p.get(knob, _ABSENT)) == value else 0.0
    return x, [f"{k}={v}" for k, v in columns]


def _posterior(
    z: np.ndarray, y: np.ndarray, prior_var: np.ndarray, noise_var: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Posterior mean and covariance of theta in y = z theta + e, and the log marginal
    likelihood of y (theta ~ N(0, diag(prior_var)), e ~ N(0, noise_var I))."""
    n = len(y)
    cov_y = (z * prior_var) @ z.T + noise_var * np.eye(n)
    chol = np.linalg.cholesky(cov_y)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    loglik = (
        -0.5 * float(y @ alpha)
        - float(np.log(np.diag(chol)).sum())
        - 0.5 * n * math.log(2 * math.pi)
    )
    precision = np.diag(1.0 / prior_var) + z.T @ z / noise_var
    cov = np.linalg.inv(precision)
    cov = (cov + cov.T) / 2
    mean = cov @ (z.T @ y) / noise_var
    return mean, cov, loglik


def fit_pooled(
    runs: Sequence[tuple[Mapping[str, Any], float]],
    *,
    baseline: Mapping[str, Any],
    noise_sd: float,
    seed: int = 0,
) -> PooledFit:
    """Fit the pooled model to `runs` (see the module doc).

    Args:
        runs: (params, tasks/h) of every measured run; a config's repeats are separate runs.
            Runs with tasks/h <= 0 are left out (nothing to take the log of).
        baseline: The baseline's params: the reference value of every knob, and left out of
            P(best) (it is what the candidates must beat, not one of them).
        noise_sd: The sd of one run's log tasks/h between fresh starts.
        seed: The Monte Carlo draws' seed.

    Raises:
        ValueError: no run with tasks/h above 0, or noise_sd <= 0.
    """
    if noise_sd <= 0:
        raise ValueError(f"noise_sd must be > 0, got {noise_sd}")
    kept = [(dict(p), float(v)) for p, v in runs if v > 0]
    if not kept:
        raise ValueError("no run with tasks/h above 0 to fit")
    keys = sorted({pooled_key(p) for p, _ in kept})
    params = {pooled_key(p): p for p, _ in kept}
    configs = [params[k] for k in keys]
    index = {k: i for i, k in enumerate(keys)}
    x_cfg, _names = _design(configs, baseline)
    n_cfg, n_eff = len(keys), x_cfg.shape[1]
    # theta = [intercept, effects..., u per config]; a config's mean = c_cfg @ theta.
    c_cfg = np.hstack([np.ones((n_cfg, 1)), x_cfg, np.eye(n_cfg)])
    rows = [index[pooled_key(p)] for p, _ in kept]
    z = c_cfg[rows]
    y = np.array([math.log(v) for _, v in kept])
    center = float(y.mean())
    yc = y - center
    best: tuple[float, float, float, float, np.ndarray, np.ndarray] | None = None
    for s, tau, scale in itertools.product(_EFFECT_SDS, _CONFIG_SDS, _NOISE_SCALES):
        prior_var = np.concatenate(
            [[_INTERCEPT_SD**2], np.full(n_eff, s * s), np.full(n_cfg, max(tau, 1e-4) ** 2)]
        )
        mean, cov, loglik = _posterior(z, yc, prior_var, (noise_sd * scale) ** 2)
        if best is None or loglik > best[0]:
            best = (loglik, s, tau, noise_sd * scale, mean, cov)
    assert best is not None
    _, s, tau, sigma, mean, cov = best
    mu = c_cfg @ mean + center
    var = np.einsum("ij,jk,ik->i", c_cfg, cov, c_cfg)
    base_key = pooled_key(baseline)
    candidates = [i for i, k in enumerate(keys) if k != base_key]
    p_best = np.full(n_cfg, math.nan)
    if candidates:
        rng = np.random.default_rng(seed)
        sub = c_cfg[candidates]
        cov_c = sub @ cov @ sub.T
        chol = np.linalg.cholesky(cov_c + 1e-12 * np.eye(len(candidates)))
        draws = (sub @ mean)[:, None] + chol @ rng.standard_normal((len(candidates), _DRAWS))
        wins = np.bincount(np.argmax(draws, axis=0), minlength=len(candidates))
        for j, i in enumerate(candidates):
            p_best[i] = wins[j] / _DRAWS
    own: dict[int, list[float]] = {}
    for r, (_p, v) in zip(rows, kept, strict=True):
        own.setdefault(r, []).append(math.log(v))
    return PooledFit(
        configs=tuple(
            PooledConfig(
                key=k,
                params=params[k],
                runs=len(own[i]),
                raw_mean=sum(own[i]) / len(own[i]),
                mean=float(mu[i]),
                sd=float(math.sqrt(max(var[i], 0.0))),
                p_best=float(p_best[i]),
            )
            for i, k in enumerate(keys)
        ),
        effect_sd=s,
        config_sd=tau,
        noise_sd=sigma,
    )
