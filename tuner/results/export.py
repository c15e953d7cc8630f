"""`tuner export`'s choice: the server a user should run, and why.

`choose_export` picks the trial: a config that beats the baseline (no speculation) on its paired
rounds, Holm-corrected over the configs judged, else the baseline, with the reason; without
confirmation rounds the choice is labelled "unconfirmed". `confirmation_look` is the same rule
looked at after each round of a sequential confirmation.
The published lesson (docs/workload.md) is that on agent traffic "no speculation" is often the
right answer, so a speculative config has to earn its place. `tuner.results.export_render` writes
the choice as a command, a unit file or a compose service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tuner.errors import StudyError
from tuner.metrics import PairedEstimate
from tuner.results.decision import Verdict, judge_study, study_noise
from tuner.results.export_rule import WIN_ALPHA, Look, export_winner, look_level, next_look
from tuner.results.rows import StudyResults, TrialRow
from tuner.results.words import tph_label

__all__ = ["ExportChoice", "choose_export", "confirmation_look"]


@dataclass(frozen=True)
class ExportChoice:
    """The trial to export, the best-scoring one, the baseline, and why this one."""

    trial: TrialRow
    best: TrialRow
    baseline: TrialRow | None
    reason: str
    study_name: str
    model: str | None = None
    gpu: str | None = None
    verdicts: Mapping[int, Verdict] = field(default_factory=dict)
    mode: str | None = None
    mode_note: str | None = None
    confirmed: bool = False  # judged on confirmation rounds (False: "unconfirmed")
    judged: int = 0  # configs the win test was corrected over (Holm)
    noise: str = ""  # the between-run noise the verdicts used and where it came from
    stopped: str | None = None  # a sequential confirmation: rounds run and why it stopped
    level: float = 0.025  # the one-sided family-wise level the win test used

    @property
    def fell_back(self) -> bool:
        """True when the exported trial is not the best-scoring one (the baseline, or a config
        that passed the paired test where the top one did not)."""
        return self.trial.number != self.best.number

    @property
    def verdict(self) -> Verdict | None:
        """The exported config's evidence against the baseline (None for the baseline)."""
        return self.verdicts.get(self.trial.number)


def _tph(t: TrialRow) -> float:
    return t.tasks_per_hour if t.tasks_per_hour is not None else (t.value or 0.0)


def _bounds(t: TrialRow) -> tuple[float, float]:
    # A trial without an interval counts as a point: the comparison stays defined.
    low = t.tasks_per_hour_low if t.tasks_per_hour_low is not None else _tph(t)
    high = t.tasks_per_hour_high if t.tasks_per_hour_high is not None else _tph(t)
    return low, high


def _score(t: TrialRow) -> str:
    low, high = _bounds(t)
    return f"{_tph(t):,.0f} [{low:,.0f}, {high:,.0f}]"


def _evidence(v: Verdict) -> str:
    if v.paired is None:
        return v.problems() or "no paired measurement with the baseline"
    where = (
        "on its confirmation rounds" if v.confirmed else "on its one search-time run (unconfirmed)"
    )
    text = f"paired tasks/h ratio to the baseline {where}: {v.paired.describe()}"
    if v.drift is not None:
        text += f"; against {v.drift.describe()}"
    problems = v.problems()
    return f"{text}; {problems}" if problems else text


def _tests(pool: Mapping[int, Verdict]) -> dict[int, PairedEstimate | None]:
    # A config that changes outputs or could not start reliably cannot win, but was judged.
    return {
        n: (v.paired if not v.changes_outputs and not v.unreliable else None)
        for n, v in sorted(pool.items())
    }


def confirmation_look(results: StudyResults, rounds: int, first: int, cap: int) -> Look:
    """The sequential confirmation's look after `rounds` rounds: stop (a winner, or nothing
    left worth more rounds, or the cap) or run another (`tuner.results.export_rule.next_look`),
    on the same verdicts and tests `choose_export` uses."""
    verdicts = judge_study(results)
    pool = {n: v for n, v in verdicts.items() if v.confirmation_attempted}
    return next_look(_tests(pool), rounds, first, cap)


def _noise_line(results: StudyResults, confirmed: bool) -> str:
    prior = results.noise
    reruns = results.baseline_reruns()
    if reruns:
        # The search measured its own noise and drift: say the prior, the own repeats and
        # the drift correction (the sd and df every unconfirmed verdict started from).
        used = study_noise(results)
        every = results.baseline_every
        how = (
            "search-time scores are ratios to the baseline's rate interpolated in run order "
            f"between the baseline starts that bracket each trial ({len(reruns)} re-run"
            f"{'s' if len(reruns) != 1 else ''} of the baseline during the search"
            + (f", every {every} trial{'s' if every != 1 else ''}" if every else "")
            + "; after the last start, the latest one)"
        )
        then = (
            "; each confirmed verdict then starts from the prior and adds its own rounds, "
            "which alternate their order (A B, B A) so a linear drift cancels"
            if confirmed
            else ""
        )
        return f"between-run noise: {used.describe()}; {how}{then}"
    if results.baseline_every == 0:
        prior_note = " (no re-runs of the baseline during the search: --baseline-every 0)"
    else:
        prior_note = ""
    own = (
        "each confirmed verdict adds its own rounds' spread (conjugate update), and the "
        "rounds alternate their order (A B, B A) so a linear drift of the machine cancels"
        if confirmed
        else "updated by this study's own baseline starts (conjugate update; their spread "
        "includes the machine's drift between them); search-time scores are not drift-corrected"
        + prior_note
    )
    return (
        f"between-run noise: the prior sd {prior.log_sd:.3f} of a round's log ratio over "
        f"{prior.df} df ({prior.source}), {own}"
    )


def _stop_line(results: StudyResults) -> str | None:
    if results.confirm_looks is None:
        return None
    first, cap = results.confirm_looks
    if results.confirm_stop is None:
        return f"confirmation: sequential, up to {cap} rounds; not finished (`tuner confirm`)"
    rounds, why = results.confirm_stop
    return (
        f"confirmation: {rounds} round{'s' if rounds != 1 else ''} of up to {cap} "
        f"(sequential, first look after {first}); stopped: {why}"
    )


def choose_export(results: StudyResults) -> ExportChoice:
    """Pick the trial to export from a study.

    Candidates are picked on the search and judged on the confirmation. When the confirmation
    stage ran, only the configs it re-ran are judged, on their paired rounds alone (their
    search-time runs were picked for being high and are not evidence). Without it (`--confirm
    0`, or no confirmation round of any candidate could be paired), every candidate is judged
    on its one search-time run, and the export says "unconfirmed". Either way a config
    "beats the baseline" only when its paired test passes Holm's correction over all the
    configs judged (family-wise one-sided 2.5%), its interval includes the between-run term,
    it did not change outputs and none of its confirmation starts failed. The best such config
    by paired ratio is exported, else the baseline.

    Raises:
        StudyError: the study has no completed feasible trial yet.
    """
    candidates = [t for t in results.trials if t.exportable]
    if not candidates:
        raise StudyError(
            f"study {results.study_name!r} has no completed feasible trial to export yet; "
            "run `tuner optimize` until one completes"
        )
    base = results.baseline
    verdicts = judge_study(results)
    attempted = {n: v for n, v in verdicts.items() if v.confirmation_attempted}
    confirmed_mode = any(v.confirmed or v.unreliable for v in attempted.values())
    pool = attempted if confirmed_mode else verdicts
    ranked = sorted(pool.values(), key=lambda v: (-(v.estimate or 0.0), v.trial.number))
    # Ties go to the lower trial number: the baseline runs first, and it is the simpler server.
    best = max(candidates, key=lambda t: (_tph(t), -t.number))
    base_estimate = None
    if ranked and base is not None:
        # Like against like: a confirmed candidate meets the baseline's runs of its own rounds.
        top_v = ranked[0]
        base_estimate = (
            top_v.base_confirmed_tph
            if confirmed_mode and top_v.base_confirmed_tph is not None
            else _tph(base)
        )
        top = top_v.trial
        best = top if (top_v.estimate or 0.0) > base_estimate else base
    tests = _tests(pool)
    level = WIN_ALPHA
    if confirmed_mode and results.confirm_looks is not None:
        # A sequential confirmation: the level of the look it stopped at (its rounds).
        rounds = max((v.paired.rounds for v in pool.values() if v.paired), default=1)
        level = look_level(rounds, *results.confirm_looks)
    winner = export_winner(tests, level) if base is not None else None
    label = "" if confirmed_mode else "unconfirmed: "

    def choice(trial: TrialRow, reason: str) -> ExportChoice:
        return ExportChoice(
            trial=trial,
            best=best,
            baseline=base,
            reason=label + reason,
            study_name=results.study_name,
            model=results.model,
            gpu=results.gpu,
            verdicts=verdicts,
            mode=results.mode,
            mode_note=results.mode_note,
            confirmed=confirmed_mode,
            judged=len(pool),
            noise=_noise_line(results, confirmed_mode),
            stopped=_stop_line(results) if confirmed_mode else None,
            level=level,
        )

    if base is None:
        return choice(
            best, f"no baseline was measured, so trial #{best.number} is exported unchallenged"
        )
    if winner is not None:
        win = pool[winner]
        assert win.paired is not None
        m = len(pool)
        reason = (
            f"#{win.trial.number} beats the baseline (no speculation): {_evidence(win)}; "
            f"one-sided p = {win.paired.p_value:.2g}, Holm-corrected over {m} "
            f"config{'s' if m != 1 else ''} judged at family-wise {level:.2g}"
        )
        if win.trial.number != best.number and best.number != base.number:
            other = verdicts[best.number]
            why_not = "it changes outputs" if other.changes_outputs else _evidence(other)
            reason += f"; #{best.number} scored higher but did not pass ({why_not})"
        return choice(win.trial, reason)
    if not ranked:
        return choice(
            base,
            f"no speculation (the baseline, #{base.number}) did the most "
            f"{tph_label(results.mode)}: "
            f"{_score(base)}",
        )
    if best.number == base.number:
        what = (
            f"confirmed: {base_estimate or 0.0:,.0f}"
            if confirmed_mode
            else f"search-time: {_score(base)}"
        )
        return choice(
            base,
            f"no speculation (the baseline, #{base.number}) did the most "
            f"{tph_label(results.mode)} "
            f"({what}); the best other config, "
            f"#{ranked[0].trial.number}, had {_evidence(ranked[0])}",
        )
    top_verdict = verdicts[best.number]
    if top_verdict.unreliable:
        why = f"it could not start reliably ({top_verdict.problems()})"
    elif top_verdict.changes_outputs:
        why = f"it changes outputs ({top_verdict.correctness()})"
    else:
        why = (
            f"it is not faster beyond the noise (Holm-corrected over {len(pool)} "
            f"config{'s' if len(pool) != 1 else ''} judged): {_evidence(top_verdict)}"
        )
    # The published lesson applies to speculation; a memory-only change gets a plainer why.
    lesson = (
        "on agent traffic speculation often costs more (KV cache, prefix reuse) than it gains"
        if best.method != "none"
        else "the baseline's default settings are the simpler server"
    )
    return choice(
        base,
        f"the best config, #{best.number} ({best.label}) at {_score(best)} "
        f"{tph_label(results.mode)}, does not "
        f"beat the baseline (no speculation) at {_score(base)}: {why}; so the baseline is "
        f"exported: {lesson}",
    )
