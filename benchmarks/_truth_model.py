"""The hierarchical model behind `grid_truth.py` (its docstring has the formula and the fit):
its design, its REML fit on a (tau, sigma) grid, its draws. Interactions are kept by greedy
forward selection on the AIC of the ML fit.

"n-gram x sitting": how much speculation helps depends on the machine and its server settings
(the grid's Zen 4 sitting gave vLLM one core, a re-record gave it both; an Intel box with AMX
another): each sitting after the first has its own shift of every n-gram config against its
baseline, so a sitting's runs inform the ranking among n-gram configs (their differences are
shared) without moving the reference sitting's speed-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.study.space import config_key


@dataclass(frozen=True)
class Run:
    """One recorded run as the model sees it."""

    source: str  # the file (relative path)
    index: int  # its index in that file's runs
    key: str
    params: dict[str, Any]
    y: float  # log tasks/h
    sitting: str  # machine and sitting: runs sharing an offset and a drift
    machine: str
    hours: float  # since the sitting's first run


TAU_MAX, SIGMA_RANGE, GRID_N = 0.4, (0.01, 0.5), 80
CURVED_HOURS = 1.5  # drift^2 only for sittings this long: a short one's curve is its noise
CANDIDATE_INTERACTIONS = ("kv:seqs", "kv:ngram", "seqs:ngram", "kv:depth", "drift^2")


def spec_of(params: dict[str, Any]) -> str:
    """The speculation cell: method x depth x lookup window."""
    if params["method"] == "none":
        return "none"
    return (
        f"ngram d{params['num_speculative_tokens']} "
        f"lookup {params['prompt_lookup_min']}-{params['prompt_lookup_max']}"
    )


class Design:
    """The fixed-effect columns for a set of runs, and the reference row of each config."""

    def __init__(self, runs: list[Run], configs: list[dict[str, Any]], extra: tuple[str, ...]):
        self.specs = sorted({spec_of(p) for p in configs} - {"none"})
        self.kv_hi = max(p["kv_cache_memory_bytes"] for p in configs)
        self.seqs_hi = max(p["max_num_seqs"] for p in configs)
        self.sittings = sorted({r.sitting for r in runs}, key=lambda s: (s != runs[0].sitting, s))
        self.extra = extra
        self.mean_hours = {
            s: float(np.mean([r.hours for r in runs if r.sitting == s])) for s in self.sittings
        }
        span = {s: max(r.hours for r in runs if r.sitting == s) for s in self.sittings}
        self.curved = [s for s in self.sittings if span[s] >= CURVED_HOURS]
        self.names = ["intercept", *(f"spec {s}" for s in self.specs), "KV high", "seqs high"]
        self.names += [f"interaction {x}" for x in extra if x != "drift^2"]
        self.names += [f"sitting {s}" for s in self.sittings[1:]]
        self.names += [f"n-gram x sitting {s}" for s in self.sittings[1:]]
        self.names += [f"drift/h {s}" for s in self.sittings]
        if "drift^2" in extra:
            self.names += [f"drift/h^2 {s}" for s in self.curved]

    def knob_row(self, p: dict[str, Any]) -> list[float]:
        spec = spec_of(p)
        kv = float(p["kv_cache_memory_bytes"] == self.kv_hi)
        seqs = float(p["max_num_seqs"] == self.seqs_hi)
        ngram = float(p["method"] != "none")
        depth = float(p.get("num_speculative_tokens", 0))
        row = [1.0, *(float(spec == s) for s in self.specs), kv, seqs]
        inter = {"kv:seqs": kv * seqs, "kv:ngram": kv * ngram, "seqs:ngram": seqs * ngram}
        inter["kv:depth"] = kv * depth
        row += [inter[x] for x in self.extra if x != "drift^2"]
        return row

    def row(self, r: Run | None, p: dict[str, Any]) -> list[float]:
        """A run's columns; `r` None: the reference (first sitting, at its mean time)."""
        sit = r.sitting if r is not None else self.sittings[0]
        h = (r.hours if r is not None else self.mean_hours[sit]) - self.mean_hours[sit]
        row = self.knob_row(p)
        row += [float(sit == s) for s in self.sittings[1:]]
        ngram = float(p["method"] != "none")
        row += [ngram * (sit == s) for s in self.sittings[1:]]
        row += [h * (sit == s) for s in self.sittings]
        if "drift^2" in self.extra:
            row += [h * h * (sit == s) for s in self.curved]
        return row


def _gls(X: np.ndarray, Z: np.ndarray, y: np.ndarray, tau: float, sigma: float) -> dict:
    """Marginal GLS for V = sigma^2 I + tau^2 Z Z': beta, and the ML / REML log-likelihoods."""
    n, p = X.shape
    V = sigma**2 * np.eye(n) + tau**2 * (Z @ Z.T)
    L = np.linalg.cholesky(V)
    Xw, yw = np.linalg.solve(L, X), np.linalg.solve(L, y)
    XtX = Xw.T @ Xw
    beta = np.linalg.solve(XtX, Xw.T @ yw)
    r = yw - Xw @ beta
    logdet = 2 * np.log(np.diag(L)).sum()
    ml = -0.5 * (logdet + r @ r + n * math.log(2 * math.pi))
    reml = ml - 0.5 * np.linalg.slogdet(XtX)[1] + 0.5 * p * math.log(2 * math.pi)
    return {"beta": beta, "ml": ml, "reml": reml}


def _grid_axes() -> tuple[np.ndarray, np.ndarray]:
    taus = np.linspace(TAU_MAX / GRID_N, TAU_MAX, GRID_N)
    sigmas = np.exp(np.linspace(*np.log(SIGMA_RANGE), GRID_N))
    return taus, sigmas


def _matrices(runs: list[Run], keys: list[str], design: Design) -> tuple[np.ndarray, ...]:
    X = np.array([design.row(r, r.params) for r in runs])
    Z = np.zeros((len(runs), len(keys)))
    for i, r in enumerate(runs):
        Z[i, keys.index(r.key)] = 1.0
    y = np.array([r.y for r in runs])
    return X, Z, y


def max_ml(runs: list[Run], keys: list[str], configs: list[dict], extra: tuple[str, ...]) -> float:
    """The maximised (ML, not REML: the fixed effects differ between models) log-likelihood."""
    X, Z, y = _matrices(runs, keys, Design(runs, configs, extra))
    taus, sigmas = _grid_axes()
    return max(_gls(X, Z, y, t, s)["ml"] for t in [1e-4, *taus[::4]] for s in sigmas[::4])


def choose_interactions(runs: list[Run], keys: list[str], configs: list[dict]) -> dict[str, Any]:
    """Greedy forward selection on AIC: at each step the candidate that lowers AIC most is kept,
    while it lowers it by more than 2."""
    kept: tuple[str, ...] = ()
    base = max_ml(runs, keys, configs, kept)
    steps: list[dict[str, float]] = []
    while True:
        width = len(Design(runs, configs, kept).names)
        tried = {}
        for x in CANDIDATE_INTERACTIONS:
            if x in kept:
                continue
            more = (*kept, x)
            k = len(Design(runs, configs, more).names) - width
            ml = max_ml(runs, keys, configs, more)
            tried[x] = (round(float(-2 * (ml - base) + 2 * k), 2), ml)
        steps.append({x: d for x, (d, _) in tried.items()})
        if not tried:
            break
        x, (d_aic, ml) = min(tried.items(), key=lambda kv: kv[1][0])
        if d_aic >= -2:
            break
        kept, base = (*kept, x), ml
    return {"kept": list(kept), "delta_aic_by_step": steps}


def fit(
    runs: list[Run], configs: list[dict[str, Any]], extra: tuple[str, ...], draws: int, seed: int
) -> dict[str, Any]:
    """REML grid posterior over (tau, sigma); exact Gaussian draws of effects and mus given it."""
    keys = [config_key(p) for p in configs]
    design = Design(runs, configs, extra)
    X, Z, y = _matrices(runs, keys, design)
    taus, sigmas = _grid_axes()
    logpost = np.array([[_gls(X, Z, y, t, s)["reml"] for s in sigmas] for t in taus])
    # Prior: flat on tau, flat on log sigma (the sigma axis is log-spaced: equal cells).
    w = np.exp(logpost - logpost.max())
    w /= w.sum()
    it, is_ = np.unravel_index(np.argmax(logpost), logpost.shape)
    rng = np.random.default_rng(seed)
    cells = rng.choice(w.size, size=draws, p=w.ravel())
    A = np.hstack([X, Z])
    R = np.array([design.row(None, p) for p in configs])  # reference rows
    p = X.shape[1]
    beta_draws = np.empty((draws, p))
    mu_draws = np.empty((draws, len(keys)))
    tau_d, sigma_d = np.empty(draws), np.empty(draws)
    for cell in np.unique(cells):
        idx = np.flatnonzero(cells == cell)
        t, s = taus[cell // GRID_N], sigmas[cell % GRID_N]
        prec = A.T @ A / s**2
        prec[p:, p:] += np.eye(len(keys)) / t**2
        Lp = np.linalg.cholesky(prec)
        mean = np.linalg.solve(prec, A.T @ y / s**2)
        eps = rng.standard_normal((len(idx), A.shape[1]))
        theta = mean + np.linalg.solve(Lp.T, eps.T).T
        beta_draws[idx] = theta[:, :p]
        mu_draws[idx] = theta[:, :p] @ R.T + theta[:, p:]
        tau_d[idx], sigma_d[idx] = t, s
    point = _gls(X, Z, y, taus[it], sigmas[is_])
    fitted = X @ point["beta"]
    return {
        "design": design,
        "keys": keys,
        "tau": (float(taus[it]), tau_d),
        "sigma": (float(sigmas[is_]), sigma_d),
        "beta": (point["beta"], beta_draws),
        "mu": mu_draws,
        "resid": y - fitted,  # marginal residuals (config effect + noise)
    }
