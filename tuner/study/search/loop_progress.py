"""The study loop's progress: what it relays while trials run and says when one finishes.

`LoopProgress` is the half of `tuner.study.search.loop.StudyLoop` that watches running trials:
it relays each running trial's rate to Optuna (`trial.report`), stops the candidates the
`PruneRule` or screening says are losing, updates the display's slots, and writes the progress
lines of a finished trial (its outcome, its confirmation round, the ETA). `StudyLoop` inherits
it; the state it reads is the loop's, declared below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr, is_feasible
from tuner.study.search.display import StudyDisplay, describe_trial
from tuner.study.search.pruning import RunningRate
from tuner.study.search.roles import is_sampled, role_of
from tuner.study.space import Preset
from tuner.study.trial.backend import TrialBackend

if TYPE_CHECKING:
    from tuner.study.search.loop_settings import LoopSettings, _Running
    from tuner.study.search.progress import ProgressLines

__all__ = ["LoopProgress"]


class LoopProgress:
    """Progress to Optuna and the user, and the pruning it allows (`StudyLoop`'s base)."""

    # The loop's state (`tuner.study.search.loop.StudyLoop.__init__` sets it).
    preset: Preset
    backend: TrialBackend
    settings: LoopSettings
    display: StudyDisplay
    inflight: dict[int, _Running]
    reported: dict[int, int]
    target: int | None
    _said_ready: set[int]
    _mode: str

    if TYPE_CHECKING:

        def _trials(self, *, fresh: bool = False) -> list[FrozenTrial]: ...

        def _done(self) -> int: ...

    def _reference(self) -> tuple[dict[int, float] | None, int, dict[int, float] | None]:
        """The baseline's running-rate curve, how many sampled trials completed, and the
        running-rate curve of the best of them (what screening compares with)."""
        curve = None
        completed = 0
        best: FrozenTrial | None = None
        for t in self._trials():
            if not is_sampled(t) or not is_feasible(t):
                continue
            completed += 1
            if curve is None and role_of(t) == Role.BASELINE:
                curve = dict(t.intermediate_values) or {1: float(t.value or 0.0)}
            if best is None or (t.value or 0.0) > (best.value or 0.0):
                best = t
        best_curve = None
        if best is not None:
            best_curve = dict(best.intermediate_values) or {1: float(best.value or 0.0)}
        return curve, completed, best_curve

    def _relay(self) -> None:
        progress = self.backend.progress()
        curve, completed, best_curve = self._reference()
        for number, run in self.inflight.items():
            p = progress.get(number)
            if p is None:
                continue
            if p.ready and number not in self._said_ready and self.display.lines is not None:
                self._said_ready.add(number)
                self.display.lines.ready(number, p.kv_cache_tokens, p.startup_s)
            if self.display.lines is not None:  # a line at least every interval (a log)
                self.display.lines.heartbeat(number, "stopping early" if run.stopping else p.state)
            if run.slot < len(self.display.slots):
                view = self.display.slots[run.slot]
                view.state = "pruning" if run.stopping else p.state
                view.tasks_done, view.tasks_total = p.tasks_done, p.tasks_total
                view.tasks_per_hour = p.tasks_per_hour
            previous = self.reported.get(number, 0)
            if p.tasks_per_hour is None or p.tasks_done <= previous:
                continue
            self.reported[number] = p.tasks_done
            run.trial.report(float(p.tasks_per_hour), p.tasks_done)
            rate = RunningRate(p.tasks_done, p.tasks_total, p.successes, p.elapsed_s)
            if run.role != Role.CANDIDATE or run.stopping:
                continue
            rule = self.settings.prune_rule
            if rule.should_prune(rate, curve, completed) or (
                rule.screening is not None and not self._screen(run, rate, previous, best_curve)
            ):
                self.backend.request_stop(number)
                run.stopping = True
        self.display.update()

    def _screen(
        self, run: _Running, rate: RunningRate, previous: int, best: dict[int, float] | None
    ) -> bool:
        """Judge a rung the candidate just reached; False when it is screened out."""
        screening = self.settings.prune_rule.screening
        assert screening is not None
        verdict = screening.judge(rate, previous, best)
        if verdict is None:
            return True
        if verdict.passed:
            run.trial.set_user_attr(TrialAttr.RUNG, verdict.rung)
            return True
        run.trial.set_user_attr(
            TrialAttr.SCREENED_OUT_AT,
            {
                "rung": verdict.rung,
                "tasks": verdict.step,
                "optimistic_tasks_per_hour": round(verdict.optimistic, 2),
                "best_tasks_per_hour": round(verdict.reference or 0.0, 2),
            },
        )
        return False

    def _say_finished(self, run: _Running, *, counted: bool) -> None:
        """The progress lines of a finished trial: its outcome, its round, the ETA."""
        lines = self.display.lines
        assert lines is not None
        number = run.trial.number
        trial = next(t for t in self._trials() if t.number == number)
        attrs = trial.user_attrs
        if number not in self._said_ready and TrialAttr.KV_CACHE_TOKENS in attrs:
            # It finished between two looks at its progress: say its server was up, late.
            timing = attrs.get(TrialAttr.TIMING) or {}
            lines.ready(number, attrs.get(TrialAttr.KV_CACHE_TOKENS), timing.get("startup_s"))
        self._said_ready.discard(number)
        lines.finished(trial, self._mode, self.preset.workload.tasks, counted=counted)
        trials = self._trials()
        if run.role == Role.CONFIRM and counted:
            self._say_round(lines, trials, attrs.get(TrialAttr.CONFIRM_ROUND))
        if self.target is not None:
            left = max(0, self.target - self._done())
        else:
            left = sum(1 for t in trials if t.state == TrialState.WAITING) + len(self.inflight)
        lines.eta(left, self.backend.slots)

    def _say_round(self, lines: ProgressLines, trials: list[FrozenTrial], round_: Any) -> None:
        """ "confirmation round r of R done" once no run of that round is queued or running."""
        if round_ is None:
            return
        confirms = [t for t in trials if role_of(t) == Role.CONFIRM]
        rounds = {t.user_attrs.get(TrialAttr.CONFIRM_ROUND) for t in confirms}
        open_ = (TrialState.WAITING, TrialState.RUNNING)
        if any(
            t.user_attrs.get(TrialAttr.CONFIRM_ROUND) == round_ and t.state in open_
            for t in confirms
        ):
            return
        of_round = [t for t in confirms if t.user_attrs.get(TrialAttr.CONFIRM_ROUND) == round_]
        base = next((t.number for t in trials if role_of(t) == Role.BASELINE), 0)
        if int(round_) == 0 and all(
            t.user_attrs.get(TrialAttr.CONFIRM_OF) == base for t in of_round
        ):
            # The round's first run, alone: the candidates' runs of round 1 are queued next.
            lines.say("floor start done (the baseline's second start: the correctness floor)")
            return
        seen = max((int(r) for r in rounds if r is not None), default=int(round_)) + 1
        cap = lines.confirm_cap
        total = f"at most {cap}" if cap is not None and cap > seen else str(seen)
        lines.say(f"confirmation round {int(round_) + 1} of {total} done")


def _best_line(trials: list[FrozenTrial], unit: str = "tasks/h") -> str:
    feasible = [t for t in trials if is_sampled(t) and is_feasible(t)]
    if not feasible:
        return "-"
    best = max(feasible, key=lambda t: t.value or 0.0)
    label = describe_trial(best.params, best.user_attrs)
    return f"trial {best.number}: {best.value:.1f} {unit} ({label})"
