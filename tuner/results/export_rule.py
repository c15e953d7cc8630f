"""The export rule: which config, if any, beats the baseline (no speculation).

Of the configs whose paired test against the baseline passes Holm's correction over every
config judged (family-wise one-sided `WIN_ALPHA`), the one with the highest paired ratio;
none: the baseline. `tuner export` (`tuner.results.export.choose_export`) applies it to a
study's verdicts (`tuner.results.decision`), the load sweep (`tuner.results.load_sweep
.winner_at`) at each load. Why the bar is that high: docs/decisions.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tuner.metrics import PairedEstimate, holm

__all__ = ["WIN_ALPHA", "export_winner"]

# One-sided family-wise error of "beats the baseline" over the configs judged (Holm).
WIN_ALPHA: Final = 0.025


def export_winner(tests: Mapping[int, PairedEstimate | None]) -> int | None:
    """The export rule: which config, if any, beats the baseline.

    Args:
        tests: Every config judged (by trial number, or any int key), with its paired
            estimate against the baseline; None for a config that cannot win (nothing paired,
            it changes outputs, it could not start reliably). It still counts in the
            correction: it was judged.

    Returns:
        Of the configs whose one-sided test passes Holm's step-down at family-wise
        `WIN_ALPHA` over all of `tests`, the one with the highest paired ratio (a tie goes to
        the first in `tests`' order); None when none passes, which exports the baseline.
    """
    p_values = {k: (e.p_value if e is not None else 1.0) for k, e in tests.items()}
    winners = holm(p_values, WIN_ALPHA)
    ranked = [(e.ratio, k) for k, e in tests.items() if k in winners and e is not None]
    if not ranked:
        return None
    best = max(ratio for ratio, _ in ranked)
    return next(k for ratio, k in ranked if ratio == best)
