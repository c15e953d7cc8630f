"""Which configs beat the baseline, on what evidence, and which changed the answers.

`judge_study` gives one `Verdict` per exportable config. Candidates are picked on the search
and judged on the confirmation: a config with confirmation runs is judged only on them, paired
round by round with the baseline's run of the same round (`tuner.metrics.paired_ratio`: one
ratio per round, an interval over the rounds that includes the recorded between-run noise); its
search-time run, picked for being high, is left out. A round whose baseline run is missing is
not paired, and is named (`Verdict.missing_base_rounds`); a confirmation start of the config
that failed counts against it (`Verdict.failed_runs`: such a config is never exported). A
config without confirmation runs is judged on its one search-time run paired with the
baseline's: one round, so its interval is the between-run term. That term, for every verdict,
is the recorded prior updated by the study's own baseline starts (`study_noise`; a conjugate
scaled inverse chi-square): on a 2-core box whose load changed, two identical configs' search
runs differed by 34% (docs/decisions.md, the A/A study), and a confirmed pair then adds its own
rounds.

When the search re-ran the baseline (`--baseline-every`, `Role.BASELINE_RERUN`), a search-time
run is paired with the baseline's drift-corrected rate at its place in the run order
(`tuner.metrics.drift.baseline_at`: interpolated between the baseline starts that bracket it,
the latest start when none follows yet; `Verdict.drift` says which), and the baseline's starts
update the prior about a fitted drift line (`tuner.metrics.drift.drift_corrected_noise`).

Correctness comes from the greedy probe against the floor of two baseline starts and, in live
mode, from the success rate against the baseline's, paired by task id within rounds (McNemar on
the discordant tasks, `tuner.metrics.paired_success_drop`).

The export rule that turns verdicts into a choice is `tuner.results.export_rule.export_winner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tuner.metrics import (
    BetweenRunNoise,
    OutputCheck,
    PairedEstimate,
    RunOutcomes,
    judge_outputs,
    paired_ratio,
    paired_success_drop,
)
from tuner.metrics.drift import BaselineAt, baseline_at, drift_corrected_noise
from tuner.metrics.noise import noise_for_study
from tuner.results.rows import StudyResults, TrialRow

__all__ = [
    "SUCCESS_DROP_ALPHA",
    "Verdict",
    "baseline_points",
    "judge_study",
    "study_noise",
]

SUCCESS_DROP_ALPHA: Final = 0.05


@dataclass(frozen=True)
class Verdict:
    """One config's evidence against the baseline."""

    trial: TrialRow  # the search trial of the config
    search_tph: float | None
    confirmed_tph: float | None  # mean over its paired confirmation rounds; None: none
    confirmed_runs: int  # paired confirmation rounds (a round with its baseline run)
    confirmed_range: tuple[float, float] | None  # lowest and highest paired confirmation run
    paired: PairedEstimate | None  # vs the baseline; None when nothing could be paired
    outputs: OutputCheck | None  # greedy probe vs the baseline; None: no probe
    success_drop_p: float | None  # live mode: one-sided p of fewer solved tasks (McNemar)
    failed_runs: tuple[str, ...] = ()  # its confirmation starts that failed, in words
    missing_base_rounds: tuple[int, ...] = ()  # its rounds without a baseline run
    base_confirmed_tph: float | None = None  # the baseline's mean over the same paired rounds
    # An unconfirmed verdict of a study that re-ran its baseline during the search: the
    # baseline's drift-corrected rate its search-time run was paired with. None: the raw one.
    drift: BaselineAt | None = None

    @property
    def confirmed(self) -> bool:
        """True when the speed comes from paired confirmation rounds."""
        return self.confirmed_runs > 0

    @property
    def confirmation_attempted(self) -> bool:
        """The confirmation stage ran this config (even if no round could be paired)."""
        return self.confirmed_runs > 0 or bool(self.failed_runs or self.missing_base_rounds)

    @property
    def unreliable(self) -> bool:
        """A confirmation start failed: a config that cannot start reliably is not exported."""
        return bool(self.failed_runs)

    @property
    def changes_outputs(self) -> bool:
        """Greedy answers clearly below the floor, or a significant drop in solved tasks."""
        dropped = self.success_drop_p is not None and self.success_drop_p < SUCCESS_DROP_ALPHA
        return dropped or (self.outputs is not None and self.outputs.changes_outputs)

    @property
    def beats_baseline(self) -> bool:
        """The paired interval is entirely above 1 (this test alone; the export corrects for
        the number of configs it judges)."""
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
            parts.append(
                f"solved tasks vs baseline, paired by task: {verdict} "
                f"(McNemar p = {self.success_drop_p:.3f})"
            )
        text = "; ".join(parts) or "not checked"
        return ("changes outputs: " + text) if self.changes_outputs else text

    def problems(self) -> str | None:
        """Failed starts and missing baseline rounds, in words; None when there are none."""
        parts = []
        if self.failed_runs:
            parts.append("confirmation start failed: " + "; ".join(self.failed_runs))
        if self.missing_base_rounds:
            rounds = ", ".join(str(r) for r in self.missing_base_rounds)
            parts.append(
                f"no baseline run in round {rounds} (not paired; `tuner confirm` re-runs it)"
            )
        return "; ".join(parts) or None


def _outcomes(rows: Sequence[TrialRow]) -> list[RunOutcomes] | None:
    runs = [r.outcomes for r in rows]
    return None if any(r is None for r in runs) else [r for r in runs if r is not None]


def _mean(rows: Sequence[TrialRow]) -> float | None:
    values = [r.tasks_per_hour for r in rows if r.tasks_per_hour is not None]
    return sum(values) / len(values) if values else None


def _range(rows: Sequence[TrialRow]) -> tuple[float, float] | None:
    values = [r.tasks_per_hour for r in rows if r.tasks_per_hour is not None]
    return (min(values), max(values)) if values else None


def _failure(row: TrialRow) -> str:
    kind = row.failure_kind or ("infeasible" if row.infeasible else "failed")
    reason = f": {row.failure_reason}" if row.failure_reason else ""
    return f"round {row.confirm_round} (trial #{row.number}) {kind}{reason}"


def _pairs(
    results: StudyResults, t: TrialRow, base: TrialRow
) -> tuple[list[tuple[TrialRow, TrialRow]], tuple[int, ...]]:
    """The (candidate, baseline) runs that count: its confirmation rounds that have a baseline
    run, or, when it has no confirmation run at all, its search-time run with the baseline's.
    Also the rounds that lack a baseline run."""
    mine, theirs = results.confirm_runs(t.number), results.confirm_runs(base.number)
    if not mine:
        return ([(t, base)] if not results.confirm_failures(t.number) else []), ()
    by_round = {r.confirm_round: r for r in theirs}
    pairs = [(r, by_round[r.confirm_round]) for r in mine if r.confirm_round in by_round]
    missing = tuple(r.confirm_round or 0 for r in mine if r.confirm_round not in by_round)
    return pairs, missing


def _paired(
    noise: BetweenRunNoise, pairs: list[tuple[TrialRow, TrialRow]]
) -> PairedEstimate | None:
    if not pairs:
        return None
    cand, bases = _outcomes([c for c, _ in pairs]), _outcomes([b for _, b in pairs])
    if not cand or not bases:
        return None
    return paired_ratio(cand, bases, noise=noise)


def baseline_points(results: StudyResults) -> list[tuple[float, float]]:
    """(place in the run order, tasks/h) of every feasible start of the baseline's config:
    its search trial, its re-runs during the search and its confirmation runs."""
    base = results.baseline
    if base is None:
        return []
    order = results.run_order()
    runs = [base, *results.baseline_reruns(), *results.confirm_runs(base.number)]
    return [
        (float(order[r.number]), r.tasks_per_hour)
        for r in runs
        if r.number in order and r.tasks_per_hour is not None and r.tasks_per_hour > 0
    ]


def study_noise(results: StudyResults) -> BetweenRunNoise:
    """The between-run noise the verdicts start from: the recorded prior (stored with the
    study) updated by the study's own baseline starts (search run, re-runs during the search,
    floor, confirmation runs) as a conjugate prior; each verdict then adds its own rounds
    (`tuner.metrics.paired_ratio`). With re-runs, about a fitted drift line
    (`tuner.metrics.drift.drift_corrected_noise`); without, about their mean
    (`tuner.metrics.noise.noise_for_study`: their spread includes the drift)."""
    base = results.baseline
    if base is None:
        return results.noise
    reruns = results.baseline_reruns()
    if reruns:
        return drift_corrected_noise(
            results.noise,
            baseline_points(results),
            reruns=len(reruns),
            every=results.baseline_every or 0,
        )
    runs = [base, *results.confirm_runs(base.number)]
    return noise_for_study(results.noise, [r.tasks_per_hour or 0.0 for r in runs])


def _drift_corrected(
    results: StudyResults, t: TrialRow, base: TrialRow
) -> tuple[RunOutcomes, BaselineAt] | None:
    """The baseline's run rescaled to its drift-corrected rate where `t` ran (the task mix of
    its search run, the rate of `baseline_at`); None without re-runs or without outcomes."""
    order = results.run_order()
    if not results.baseline_reruns() or base.outcomes is None or t.number not in order:
        return None
    raw = base.outcomes.tasks_per_hour
    if raw <= 0:
        return None
    at = baseline_at(float(order[t.number]), baseline_points(results))
    o = base.outcomes
    return RunOutcomes(o.outcomes, o.wall_s * raw / at.tasks_per_hour, o.agents), at


def _outputs(results: StudyResults, t: TrialRow, base: TrialRow) -> OutputCheck | None:
    reference = base.probe
    probe = t.probe or next((r.probe for r in results.confirm_runs(t.number) if r.probe), None)
    if reference is None or probe is None:
        return None
    # Every later start of the baseline (its confirmation runs, the floor start) adds to the
    # floor.
    restarts = [r.probe.outputs for r in results.confirm_runs(base.number) if r.probe]
    return judge_outputs(reference.outputs, probe.outputs, *restarts)


def _success_drop(results: StudyResults, pairs: list[tuple[TrialRow, TrialRow]]) -> float | None:
    if not results.graded:
        return None  # replay and traces complete tasks; nothing was graded
    tasks: list[tuple[bool, bool]] = []
    for cand, base in pairs:
        if cand.outcomes is None or base.outcomes is None:
            continue
        theirs = {tid: ok for tid, ok, _ in base.outcomes.outcomes}
        tasks += [(ok, theirs[tid]) for tid, ok, _ in cand.outcomes.outcomes if tid in theirs]
    return paired_success_drop(tasks)


def judge_study(results: StudyResults) -> dict[int, Verdict]:
    """A verdict per exportable config other than the baseline, keyed by trial number."""
    base = results.baseline
    noise = study_noise(results)
    out: dict[int, Verdict] = {}
    for t in results.trials:
        if not t.exportable or (base is not None and t.number == base.number):
            continue
        failed = tuple(_failure(r) for r in results.confirm_failures(t.number))
        if base is None:
            out[t.number] = Verdict(t, t.tasks_per_hour, None, 0, None, None, None, None, failed)
            continue
        pairs, missing = _pairs(results, t, base)
        confirmed = [c for c, _ in pairs if c.number != t.number]
        corrected = None if confirmed or not pairs else _drift_corrected(results, t, base)
        if corrected is not None and t.outcomes is not None:
            paired = paired_ratio([t.outcomes], [corrected[0]], noise=noise)
        else:
            corrected = None
            paired = _paired(results.noise if confirmed else noise, pairs)
        out[t.number] = Verdict(
            trial=t,
            search_tph=t.tasks_per_hour,
            confirmed_tph=_mean(confirmed),
            confirmed_runs=len(confirmed),
            confirmed_range=_range(confirmed),
            # Confirmed: the prior updated by the rounds' own spread (interleaved, order
            # alternating: the machine's drift cancels). A search-time pair spans the drift
            # between two trials, which the baseline's starts show: the prior updated by them
            # (and, with re-runs, the baseline's rate interpolated to the trial's place).
            paired=paired,
            outputs=_outputs(results, t, base),
            success_drop_p=_success_drop(results, pairs),
            failed_runs=failed,
            missing_base_rounds=missing,
            base_confirmed_tph=_mean([b for c, b in pairs if c.number != t.number]),
            drift=corrected[1] if corrected is not None else None,
        )
    return out
