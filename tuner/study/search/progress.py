"""Progress as plain lines, for output that is not a terminal (a file, nohup, CI, a log).

On a terminal `tuner optimize` and `tuner confirm` redraw a live table
(`tuner.study.search.display`); anywhere else that table would print nothing useful, so each event
becomes one flushed line:

    [0:00:00] estimate: about 37 min for 13 server runs (6 trials + up to 7 confirmation runs), ...
    [0:00:02] trial 0 (baseline) started: none kv 2.0GB seqs 8
    [0:00:44] trial 0 server ready: 86,784 KV cache tokens, started in 41.9 s
    [0:02:50] trial 0 scored: 538 completed tasks/h [451, 640], 12 tasks, run 168 s
    [0:02:50] ETA: about 31 min left (11 server runs to go at 168 s a run, measured)
    [0:05:31] trial 3 pruned after 5 of 12 tasks: 210 completed tasks/h so far, clearly below ...
    [0:20:10] confirmation round 1 of 3 done

While a trial runs, a line at least every `TUNER_PROGRESS_INTERVAL_S` seconds (default 60)
repeats what its worker says it is doing (`heartbeat_line`), so a log never stays silent
through a slow server start or a long scored window:

    [0:01:00] trial 0 server starting: 58 s, vLLM says: warm-up: compiling for the batch shapes
    [0:03:00] trial 0 scoring: 61 s, 5 of 12 tasks done, 2 agents, 1,234 prompt tok/s and 41 ...
    [0:04:00] trial 0 plain benchmark: 12 s, 1 and 8 streams

The estimate at the start and the measured ETA after each run (`tuner.study.search.estimate`)
are said through `ProgressLines` too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr, is_infeasible
from tuner.results.words import mode_line, tph_label
from tuner.study.search.estimate import eta_line
from tuner.workload.reuse import reuse_suffix

__all__ = [
    "ProgressLines",
    "clock",
    "finished_line",
    "heartbeat_line",
    "interrupted_line",
    "ready_line",
    "started_line",
    "workload_line",
]


def clock(seconds: float) -> str:
    """Elapsed time as H:MM:SS."""
    s = max(0, int(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def workload_line(preset: Any) -> str:
    """What each trial runs and what its score means in this mode."""
    from tuner.results.configs import MODE_NOTES

    w = preset.workload
    mode = "traces" if w.traces else w.mode
    return (
        f"workload: {mode_line(mode, MODE_NOTES.get(mode), w.traces)}; {w.tasks} scored tasks "
        f"with {w.agents} agents, scored in {tph_label(mode)}"
    )


def _who(number: int, user_attrs: dict[str, Any]) -> str:
    role = user_attrs.get(TrialAttr.ROLE)
    if role == Role.CONFIRM:
        of = user_attrs.get(TrialAttr.CONFIRM_OF)
        r = user_attrs.get(TrialAttr.CONFIRM_ROUND)
        where = f", round {int(r) + 1}" if r is not None else ""
        return f"trial {number} (confirmation of #{of}{where})"
    if role in (Role.BASELINE, Role.CONTROL):
        return f"trial {number} ({role})"
    if role == Role.BASELINE_RERUN:
        return f"trial {number} (baseline again: drift check, not counted)"
    return f"trial {number}"


def started_line(number: int, user_attrs: dict[str, Any], label: str) -> str:
    """A trial was handed to a worker."""
    return f"{_who(number, user_attrs)} started: {label}"


def ready_line(number: int, kv_cache_tokens: int | None, startup_s: float | None) -> str:
    """Its server answered /health."""
    kv = (
        f"{kv_cache_tokens:,} KV cache tokens"
        if kv_cache_tokens is not None
        else "KV cache size not reported"
    )
    took = f", started in {startup_s:.1f} s" if startup_s is not None else ""
    return f"trial {number} server ready: {kv}{took}"


def _interval(attrs: dict[str, Any]) -> str:
    low, high = attrs.get(TrialAttr.TASKS_PER_HOUR_LOW), attrs.get(TrialAttr.TASKS_PER_HOUR_HIGH)
    return f" [{low:,.0f}, {high:,.0f}]" if low is not None and high is not None else ""


def _first(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0][:300] if lines else "no reason recorded"


def finished_line(trial: FrozenTrial, mode: str | None, tasks_total: int | None = None) -> str:
    """What a finished trial came to, in one line: scored, pruned, infeasible or failed."""
    attrs = dict(trial.user_attrs)
    who = _who(trial.number, attrs)
    label = tph_label(mode)
    wall = (attrs.get(TrialAttr.TIMING) or {}).get("worker_wall_s")
    took = f", run {wall:.0f} s" if isinstance(wall, (int, float)) else ""
    if is_infeasible(trial):
        return f"{who} infeasible: {_first(attrs.get(TrialAttr.FAILURE_REASON))}{took}"
    of = f" of {tasks_total}" if tasks_total else ""
    screened = attrs.get(TrialAttr.SCREENED_OUT_AT)
    if trial.state == TrialState.PRUNED and isinstance(screened, dict):
        return (
            f"{who} screened out at rung {screened.get('rung')} after {screened.get('tasks')}"
            f"{of} tasks: at most {screened.get('optimistic_tasks_per_hour', 0):,.0f} {label} "
            f"against the best trial's {screened.get('best_tasks_per_hour', 0):,.0f} on the "
            f"same tasks{took}"
        )
    if trial.state == TrialState.PRUNED:
        done = attrs.get(TrialAttr.PRUNED_AT_TASKS)
        rate = attrs.get(TrialAttr.TASKS_PER_HOUR)
        so_far = f": {rate:,.0f} {label} so far" if rate is not None else ""
        return (
            f"{who} pruned after {done}{of} tasks{so_far}, clearly below the baseline's pace "
            f"at the same point{took}"
        )
    if trial.state == TrialState.FAIL:
        kind = attrs.get(TrialAttr.FAILURE_KIND) or "failed"
        return f"{who} failed ({kind}): {_first(attrs.get(TrialAttr.FAILURE_REASON))}{took}"
    value = attrs.get(TrialAttr.TASKS_PER_HOUR, trial.value)
    score = f"{value:,.0f} {label}{_interval(attrs)}" if value is not None else "no score"
    rung = attrs.get(TrialAttr.RUNG)
    passed = f", passed screening rung {rung}" if rung is not None else ""
    return f"{who} scored: {score}{took}{passed}{reuse_suffix(attrs)}"


def heartbeat_line(number: int, state: str, seconds: float) -> str:
    """A running trial's phase (the worker's words: "phase" or "phase: detail") and how long
    it has been in that phase."""
    phase, _, detail = state.partition(": ")
    detail = f", {detail}" if detail else ""
    return f"trial {number} {_phase(phase)}: {seconds:.0f} s{detail}"


def _phase(state: str) -> str:
    # A trial whose worker has not said anything yet is starting its server.
    return "server starting" if state == "starting" else state


def interrupted_line(trials: list[tuple[int, dict[str, Any], str]], resume: str) -> str:
    """What Ctrl-C stopped (trial number, its user attributes, its config label), that it goes
    back to the queue, and the command that resumes."""
    if not trials:
        what = "no trial was running"
    else:
        names = [f"{_who(n, attrs)} ({label})" for n, attrs, label in trials]
        one = len(names) == 1
        what = (
            f"{' and '.join(names)} {'stops' if one else 'stop'} and "
            f"{'goes' if one else 'go'} back to the queue"
        )
    return f"interrupted: {what}; resume with: {resume} (Ctrl-C again quits at once)"


def _interval_s() -> float:
    from tuner.settings import get_settings

    return get_settings().progress_interval_s


@dataclass
class ProgressLines:
    """Writes one flushed line per study event to `stream` (stdout by default)."""

    stream: TextIO = field(default_factory=lambda: sys.stdout)
    now: Callable[[], float] = time.monotonic
    # Runs planned after the search, at most (the confirmation's): added to the search's ETA;
    # in the queued stages that follow (`queued_stage`) each finished run uses one up.
    later_runs: int = 0
    queued_stage: bool = False
    confirm_cap: int | None = None  # the confirmation's cap on rounds, when this command has one
    durations: list[float] = field(default_factory=list)
    # A running trial says what it does at least this often (TUNER_PROGRESS_INTERVAL_S).
    interval_s: float = field(default_factory=_interval_s)

    def __post_init__(self) -> None:
        self._t0 = self.now()
        self._started: dict[int, float] = {}
        self._last: dict[int, float] = {}  # when each running trial's last line was said
        self._phases: dict[int, tuple[str, float]] = {}  # its phase and since when

    def say(self, text: str) -> None:
        """One line, prefixed with the time since the command started, flushed."""
        print(f"[{clock(self.now() - self._t0)}] {text}", file=self.stream, flush=True)

    def started(self, number: int, user_attrs: dict[str, Any], label: str) -> None:
        """A trial went to a worker."""
        now = self.now()
        self._started[number] = self._last[number] = now
        self._phases[number] = ("server starting", now)
        self.say(started_line(number, user_attrs, label))

    def ready(self, number: int, kv_cache_tokens: int | None, startup_s: float | None) -> None:
        """A trial's server is up."""
        self._last[number] = self.now()
        self.say(ready_line(number, kv_cache_tokens, startup_s))

    def heartbeat(self, number: int, state: str) -> None:
        """A running trial's latest state; said when `interval_s` passed since its last line."""
        now = self.now()
        phase = _phase(state.partition(": ")[0])
        if self._phases.get(number, ("", 0.0))[0] != phase:
            self._phases[number] = (phase, now)
        if now - self._last.setdefault(number, now) < self.interval_s:
            return
        self._last[number] = now
        self.say(heartbeat_line(number, state, now - self._phases[number][1]))

    def finished(
        self, trial: FrozenTrial, mode: str | None, tasks_total: int | None, *, counted: bool
    ) -> None:
        """A trial came back; `counted`: it was a full run (a re-queued crash is not)."""
        self.say(finished_line(trial, mode, tasks_total))
        self._last.pop(trial.number, None)
        self._phases.pop(trial.number, None)
        start = self._started.pop(trial.number, None)
        if counted and start is not None:
            self.durations.append(self.now() - start)
        if counted and self.queued_stage:
            self.later_runs = max(0, self.later_runs - 1)

    def eta(self, left_in_stage: int, slots: int) -> None:
        """The measured ETA, once a run has finished in this command.

        In the search: its runs left and the runs planned after it. In a queued stage (the
        floor start, a confirmation round): the queued runs, or the planned runs not yet used
        when more (a later round may still be queued), as a cap."""
        if not self.durations:
            return
        if not self.queued_stage:
            self.say(eta_line(left_in_stage + self.later_runs, slots, self.durations))
            return
        left = max(left_in_stage, self.later_runs)
        self.say(eta_line(left, slots, self.durations, at_most=left > left_in_stage))
