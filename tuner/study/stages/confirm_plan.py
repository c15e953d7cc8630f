"""The confirmation stage's plan: how many finalists, up to how many rounds, from `--confirm K,R`,
the preset or the default, and which plan a driver runs a stage already under way with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import optuna

from tuner.attrs import StudyAttr
from tuner.defaults import CONFIRM_K, CONFIRM_ROUNDS
from tuner.errors import ConfigError

if TYPE_CHECKING:
    from tuner.study.space import Preset


__all__ = [
    "DEFAULT_CONFIRM",
    "ConfirmPlan",
    "parse_confirm",
    "stage_plan",
]


@dataclass(frozen=True)
class ConfirmPlan:
    """Top `k` candidates and the baseline, up to `rounds` more runs each (k = 0: no
    confirmation). Rounds are sequential: the verdict is first looked at after `first_look`
    rounds and after each round after it, and the stage stops as soon as it is decided
    (`tuner.results.export_rule.next_look`); `rounds` is the cap."""

    k: int = CONFIRM_K
    rounds: int = CONFIRM_ROUNDS

    @property
    def enabled(self) -> bool:
        """False when the stage is switched off (`--confirm 0`)."""
        return self.k > 0 and self.rounds > 0

    @property
    def first_look(self) -> int:
        """Rounds before the verdict is first looked at; `rounds` is the cap."""
        from tuner.results.export_rule import FIRST_LOOK

        return min(FIRST_LOOK, self.rounds)

    def looks(self) -> dict[str, int]:
        """As stored on the study (`tuner.attrs.StudyAttr.CONFIRM_PLAN`)."""
        return {"k": self.k, "first": self.first_look, "max": self.rounds}

    @classmethod
    def for_preset(cls, preset: Preset) -> ConfirmPlan:
        """The preset's `confirm`, else the default: the top 2 candidates, up to 10 rounds.

        The decision simulation (benchmarks/decision_sim.py, docs/decision-sim.md) drew studies
        from the noise fitted to every recorded run: at the paired CV of 7.3% of a fresh shared
        box one candidate confirmed in 3 fixed rounds found a true +10% in about 4 studies of
        10, and no cap with one candidate reached 8; the runner-up's slot (the search often
        ranks the real gain second) and sequential rounds up to 10 did, and a decided verdict
        stops early. GPU presets use the same plan; their verdicts use the noise measured on
        H200s (the presets' `between_run`), not the CPU prior.
        """
        if preset.confirm is not None:
            return cls(preset.confirm.top_k, preset.confirm.rounds)
        return cls(CONFIRM_K, CONFIRM_ROUNDS)


DEFAULT_CONFIRM: Final = ConfirmPlan()


def parse_confirm(text: str) -> ConfirmPlan:
    """`K,MAX` (or `0` for off) from the command line: the top K candidates, up to MAX rounds
    (rounds stop early once the verdict is decided; `K,R` as before names the same stage).

    Raises:
        ConfigError: not two non-negative integers.
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if numbers == [0]:
        return ConfirmPlan(0, 0)
    if len(numbers) != 2 or min(numbers) < 0:
        raise ConfigError(
            f"--confirm {text!r}: give K,R (top K candidates, up to R rounds each, stopping "
            "once the verdict is decided), e.g. 2,10, or 0 to skip confirmation"
        )
    return ConfirmPlan(numbers[0], numbers[1])


def stage_plan(study: optuna.Study, plan: ConfirmPlan) -> tuple[ConfirmPlan, str | None]:
    """The plan this driver runs the stage with, and a line when it is not its own.

    A stage that is under way (its plan stored by the driver that began it, no stop recorded
    yet: another driver's, or an interrupted run of this command) keeps its plan, so every
    driver looks at the same rounds with the same cap and the export does not depend on which
    finishes last. A stage that has stopped may be extended with another plan (`tuner confirm
    --confirm K,R`)."""
    attrs = study.user_attrs  # one read of the storage
    stored = attrs.get(StudyAttr.CONFIRM_PLAN)
    if not plan.enabled or stored is None or StudyAttr.CONFIRM_STOP in attrs:
        return plan, None
    theirs = ConfirmPlan(int(stored["k"]), int(stored["max"]))
    if theirs == plan:
        return plan, None
    return theirs, (
        f"confirmation: this study's stage is under way with --confirm {theirs.k},{theirs.rounds} "
        f"(begun by another driver or an interrupted run), so this driver runs it with that, "
        f"not --confirm {plan.k},{plan.rounds}; once it has stopped, `tuner confirm --confirm "
        f"{plan.k},{plan.rounds}` extends it"
    )
