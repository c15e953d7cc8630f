"""Defaults a user sees in more than one place (a command's help and the code that applies it).

Kept here, importing nothing, so the CLI's help text and the stage that applies a default read
the same number without the CLI importing the stage (Optuna costs seconds at start).
"""

from __future__ import annotations

from typing import Final

# The confirmation stage: the top CONFIRM_K candidates and the baseline, up to CONFIRM_ROUNDS
# rounds (tuner.study.stages.confirm_plan.ConfirmPlan, which says why these numbers).
CONFIRM_K: Final = 2
CONFIRM_ROUNDS: Final = 10
