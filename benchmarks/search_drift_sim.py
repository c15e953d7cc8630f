"""How often the re-runs of the baseline during the search should come (`--baseline-every K`).

A simulated search of `--n-trials 20` on one slot whose 19 candidates are all copies of the
baseline, on a machine drawn from the fitted noise model (benchmarks/data/noise-model.json):
each start's log tasks/h is drift x its place in the run order plus a normal between-start
shift. Each copy is judged as the product judges an unconfirmed config (`paired_ratio` against
the baseline's drift-corrected rate, `baseline_at`, with the prior updated by the baseline's
starts, `drift_corrected_noise`; K = 0: against the raw baseline, prior updated as before by
`noise_for_study`). Printed per K: the extra starts, the share of copies whose interval lies
wholly above 1 (false wins, one test each, no Holm), and the mean |log ratio| of the copies (how
far a copy's score sits from 1).

    python benchmarks/search_drift_sim.py [--studies 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.metrics import DEFAULT_NOISE, RunOutcomes, paired_ratio
from tuner.metrics.drift import baseline_at, drift_corrected_noise
from tuner.metrics.noise import noise_for_study

N_TRIALS = 20
SD = 0.046  # pooled between-start sd of log tasks/h (noise-model.json "pooled")
DRIFTS = (0.0, -0.0051, 0.0076, 0.0135)  # none, large grid, small grid, its interval's end


def _run(tph: float) -> RunOutcomes:
    return RunOutcomes((("t", True, 3600.0 / tph),), 3600.0 / tph)


def study(every: int, drift: float, rng: random.Random) -> tuple[int, int, list[float], int]:
    """(false wins, copies judged, their log ratios, baseline re-runs) of one search."""
    order: list[str] = ["baseline"]
    since = 0
    while sum(1 for r in order if r != "rerun") < N_TRIALS:
        if every and since >= every:
            order.append("rerun")
            since = 0
            continue
        order.append("copy")
        since += 1
    rates = [1000.0 * math.exp(drift * i + rng.gauss(0.0, SD)) for i in range(len(order))]
    bases = [(float(i), rates[i]) for i, r in enumerate(order) if r != "copy"]
    reruns = len(bases) - 1
    if reruns:
        noise = drift_corrected_noise(DEFAULT_NOISE, bases, reruns=reruns, every=every)
    else:
        noise = noise_for_study(DEFAULT_NOISE, [rates[0]])
    wins, logs = 0, []
    for i, role in enumerate(order):
        if role != "copy":
            continue
        base = baseline_at(float(i), bases).tasks_per_hour if reruns else rates[0]
        est = paired_ratio([_run(rates[i])], [_run(base)], noise=noise)
        assert est is not None
        wins += est.beats
        logs.append(math.log(est.ratio))
    return wins, len(logs), logs, reruns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"{args.studies} searches of {N_TRIALS} trials a cell, between-start sd {SD}")
    print("| drift a run | K | extra starts | false wins (per copy) | mean abs log ratio |")
    print("|---|---|---|---|---|")
    for drift in DRIFTS:
        for every in (0, 3, 5, 10):
            rng = random.Random(args.seed)
            wins = judged = extra = 0
            logs: list[float] = []
            for _ in range(args.studies):
                w, j, lg, r = study(every, drift, rng)
                wins, judged, extra = wins + w, judged + j, extra + r
                logs += lg
            mean_abs = statistics.fmean(abs(x) for x in logs)
            print(
                f"| {drift:+.4f} | {every or 'off'} | {extra / args.studies:.1f} | "
                f"{wins / judged:.2%} | {mean_abs:.4f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
