"""Did a config solve fewer tasks than the baseline? Paired by task id within rounds.

Every config plays the same task ids in a round, so a task is a pair (candidate solved it,
baseline solved it). Only discordant pairs say anything: `paired_success_drop` is McNemar's
exact one-sided test on them (under no difference, each discordant task is a fair coin). The
rounds' tasks are not pooled as independent samples of two proportions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["paired_success_drop"]


def paired_success_drop(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """One-sided exact McNemar p-value that the candidate solves fewer tasks than the baseline.

    Args:
        pairs: (candidate solved, baseline solved) per task id per round.

    Returns:
        P(at least b of the b + c discordant tasks go the baseline's way | fair coin), where b
        counts tasks only the baseline solved and c those only the candidate solved; None when
        no task is discordant (nothing to test).
    """
    b = sum(1 for cand, base in pairs if base and not cand)
    c = sum(1 for cand, base in pairs if cand and not base)
    n = b + c
    if n == 0:
        return None
    return float(sum(math.comb(n, k) for k in range(b, n + 1)) / 2**n)
