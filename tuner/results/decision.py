"""Which configs beat the baseline, on what evidence, and which changed the answers.

`judge_study` gives one `Verdict` per exportable config. Its speed comes from a paired
comparison with the baseline (`tuner.metrics.paired_ratio`): from the confirmation rounds when
the config was confirmed (the search-time run is left out there, since it was picked for being
high), else from its one search-time run paired task by task with the baseline's. Correctness
comes from the greedy probe against the floor of two baseline starts and, in live mode, from the
success rate against the baseline's (two-proportion test). The export rule
(`tuner.results.export.choose_export`) keeps the configs whose paired interval is above 1 and
that did not change outputs, then picks the best of those.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tuner.metrics import (
    OutputCheck,
    PairedEstimate,
    RunOutcomes,
    judge_outputs,
    paired_ratio,
    two_proportion_drop,
)
from tuner.results.loading import StudyResults, TrialRow

__all__ = ["SUCCESS_DROP_ALPHA", "Verdict", "judge_study"]

SUCCESS_DROP_ALPHA: Final = 0.05


@dataclass(frozen=True)
class Verdict:
    """One config's evidence against the baseline."""

    trial: TrialRow  # the search trial of the config
    search_tph: float | None
    confirmed_tph: float | None  # mean over its confirmation runs; None: not confirmed
    confirmed_runs: int
    confirmed_range: tuple[float, float] | None  # lowest and highest confirmation run
    paired: PairedEstimate | None  # vs the baseline; None when nothing could be paired
    outputs: OutputCheck | None  # greedy probe vs the baseline; None: no probe
    success_drop_p: float | None  # live mode: one-sided p of a lower success rate

    @property
    def confirmed(self) -> bool:
        """True when the speed comes from confirmation rounds."""
        return self.confirmed_runs > 0

    @property
    def changes_outputs(self) -> bool:
        """Greedy answers clearly below the floor, or a significant drop in solved tasks."""
        dropped = self.success_drop_p is not None and self.success_drop_p < SUCCESS_DROP_ALPHA
        return dropped or (self.outputs is not None and self.outputs.changes_outputs)

    @property
    def beats_baseline(self) -> bool:
        """The paired interval is entirely above 1."""
        return self.paired is not None and self.paired.beats

    @property
    def estimate(self) -> float | None:
        """The tasks/h a user should expect: confirmed when confirmed, else search-time."""
        return self.confirmed_tph if self.confirmed else self.search_tph

    def correctness(self) -> str:
        """In words, for report and export."""
        parts = []
        if self.outputs is not None:
            parts.append(self.outputs.describe())
        if self.success_drop_p is not None:
            dropped = self.success_drop_p < SUCCESS_DROP_ALPHA
            verdict = "a significant drop" if dropped else "no drop"
            parts.append(f"success rate vs baseline: {verdict} (p = {self.success_drop_p:.3f})")
        text = "; ".join(parts) or "not checked"
        return ("changes outputs: " + text) if self.changes_outputs else text


def _outcomes(rows: list[TrialRow]) -> list[RunOutcomes] | None:
    runs = [r.outcomes for r in rows]
    return None if any(r is None for r in runs) else [r for r in runs if r is not None]


def _mean(rows: list[TrialRow]) -> float | None:
    values = [r.tasks_per_hour for r in rows if r.tasks_per_hour is not None]
    return sum(values) / len(values) if values else None


def _range(rows: list[TrialRow]) -> tuple[float, float] | None:
    values = [r.tasks_per_hour for r in rows if r.tasks_per_hour is not None]
    return (min(values), max(values)) if values else None


def _paired(results: StudyResults, t: TrialRow, base: TrialRow) -> PairedEstimate | None:
    mine, theirs = results.confirm_runs(t.number), results.confirm_runs(base.number)
    by_round = {r.confirm_round: r for r in theirs}
    pairs = [(r, by_round[r.confirm_round]) for r in mine if r.confirm_round in by_round]
    if pairs:
        cand, bases = _outcomes([c for c, _ in pairs]), _outcomes([b for _, b in pairs])
    else:
        cand, bases = _outcomes([t]), _outcomes([base])
    if not cand or not bases:
        return None
    return paired_ratio(cand, bases)


def _outputs(results: StudyResults, t: TrialRow, base: TrialRow) -> OutputCheck | None:
    reference = base.probe
    probe = t.probe or next((r.probe for r in results.confirm_runs(t.number) if r.probe), None)
    if reference is None or probe is None:
        return None
    # Every later start of the baseline (its confirmation runs) adds to the floor.
    restarts = [r.probe.outputs for r in results.confirm_runs(base.number) if r.probe]
    return judge_outputs(reference.outputs, probe.outputs, *restarts)


def _success_drop(results: StudyResults, t: TrialRow, base: TrialRow) -> float | None:
    if not results.graded:
        return None  # replay and traces complete tasks; nothing was graded

    def pooled(rows: list[TrialRow]) -> tuple[int, int]:
        return (sum(r.successes or 0 for r in rows), sum(r.tasks or 0 for r in rows))

    mine = results.confirm_runs(t.number) or [t]
    theirs = results.confirm_runs(base.number) or [base]
    (s1, n1), (s2, n2) = pooled(mine), pooled(theirs)
    return two_proportion_drop(s1, n1, s2, n2)


def judge_study(results: StudyResults) -> dict[int, Verdict]:
    """A verdict per exportable config other than the baseline, keyed by trial number."""
    base = results.baseline
    out: dict[int, Verdict] = {}
    for t in results.trials:
        if not t.exportable or (base is not None and t.number == base.number):
            continue
        runs = results.confirm_runs(t.number)
        out[t.number] = Verdict(
            trial=t,
            search_tph=t.tasks_per_hour,
            confirmed_tph=_mean(runs),
            confirmed_runs=len(runs),
            confirmed_range=_range(runs),
            paired=_paired(results, t, base) if base is not None else None,
            outputs=_outputs(results, t, base) if base is not None else None,
            success_drop_p=_success_drop(results, t, base) if base is not None else None,
        )
    return out
