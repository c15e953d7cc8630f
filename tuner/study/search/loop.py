"""The study loop: ask, run on a backend, prune, tell; the one place that decides what runs.

`StudyLoop.run()` is what `tuner optimize` and `tuner explain` execute (through
`tuner.study.search.driver`), and what the sample-efficiency benchmark replays on a simulated
backend: the sampler, the pruner rule, duplicate handling, constraints and the budget are this code,
whatever runs the trials (`tuner.study.trial.backend.TrialBackend`) and whatever storage the study
uses (an `optuna.storages.InMemoryStorage` and no `Store` are fine).

Lifecycle of one `run()`:

1. Recover: fail and re-queue trials of dead drivers, repair half-done recoveries
   (`tuner.study.search.resume`).
2. Budgeted runs: queue the baseline if none is measured or queued; fix the target
   (`budget_target`).
3. Loop: fill idle slots (queued trials first, a due re-run of the baseline (`rerun_due`), then
   `propose()`d candidates, never a repeat);
   relay progress to Optuna and stop candidates the `PruneRule` says are losing; record and
   `tell` each result; beat the heartbeat of running trials.
4. Stop when the target is met, the queue is empty (unbudgeted runs), the space is exhausted
   or the time is up, once nothing runs.

`StudyLoop` keeps the dispatch and the results here; it inherits what it relays and says
while trials run (`tuner.study.search.loop_progress.LoopProgress`: the pruning too) and its
budget's side (`tuner.study.search.loop_budget.LoopBudget`); what it is given and returns are
`tuner.study.search.loop_settings`'s.

A simulated study (what the sample-efficiency benchmark does, with its own backend):

    study = optuna.create_study(direction="maximize")  # in memory, no tuner tables
    make = request_factory(preset, model_path="recorded", cache_dir=Path("."))
    StudyLoop(study, preset, backend, make, LoopSettings(n_trials=30, seed=seed)).run()
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import optuna
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, StudyAttr, TrialAttr
from tuner.results.configs import describe_config_short
from tuner.results.words import tph_label
from tuner.storage import Store
from tuner.study.search.display import SlotView, StudyDisplay
from tuner.study.search.loop_budget import LoopBudget
from tuner.study.search.loop_progress import LoopProgress, _best_line
from tuner.study.search.loop_settings import LoopOutcome, LoopSettings, RequestFactory, _Running
from tuner.study.search.recording import record_result
from tuner.study.search.resume import (
    HEARTBEAT_INTERVAL_S,
    ask,
    budget_target,
    counted,
    ensure_baseline,
    mark_interrupted,
    recover,
    requeue,
    this_driver,
)
from tuner.study.search.roles import (
    SAMPLED_ROLES,
    enqueue_baseline_copy,
    enqueue_baseline_rerun,
    is_sampled,
    rerun_due,
)
from tuner.study.search.sampling import enumerate_space, propose, taken_configs
from tuner.study.space import Preset, config_key
from tuner.study.trial.backend import Finished, TrialBackend

__all__ = ["PLACEMENT_WAIT_S", "StudyLoop"]

# How long the loop, with nothing running and a trial to start, waits for a slot whose worker
# died to get its replacement (`TrialBackend.ready`): a Ray actor is placed again within seconds
# on a live node. Ending the run at once left the re-queued trial of a killed worker unrun
# (issue 48); past this wait, the run ends and the trial stays queued for the next one.
PLACEMENT_WAIT_S = 120.0


class StudyLoop(LoopProgress, LoopBudget):
    """Keeps every slot of a backend busy with the study's next trials."""

    def __init__(
        self,
        study: optuna.Study,
        preset: Preset,
        backend: TrialBackend,
        make_request: RequestFactory,
        settings: LoopSettings,
        *,
        store: Store | None = None,
        display: StudyDisplay | None = None,
    ) -> None:
        self.study, self.preset, self.backend = study, preset, backend
        self.make_request, self.settings, self.store = make_request, settings, store
        self.display = display or StudyDisplay(total=0, study_name=study.study_name, enabled=False)
        self.configs = enumerate_space(preset)
        self.inflight: dict[int, _Running] = {}
        self.reported: dict[int, int] = {}
        self.target: int | None = None
        self.stop_requested = False  # SIGTERM/SIGINT handlers set it; run() stops cleanly
        self.exhausted = False
        self._trials_cache: list[FrozenTrial] | None = None
        self._deadline: float | None = None
        self._last_beat = float("-inf")
        storage = study._storage
        # Only an RDB storage beats (and only it can be shared); in memory there is one driver.
        self._heartbeat = isinstance(storage, BaseHeartbeat) and is_heartbeat_enabled(storage)
        self._storage = cast(BaseHeartbeat, storage)
        self._driver = this_driver()
        self._said_ready: set[int] = set()
        self._began: dict[int, float] = {}  # when each running trial was handed to a worker
        self._base_done = 0  # counted trials before this run (a budget's target adds to it)
        self._budget_stopped = False
        self._unplaced_since: float | None = None  # since when no slot is placed (`ready`)
        self._said_plan: tuple[int, int, int] | None = None  # the budget's plan, as last said
        w = preset.workload
        self._mode = "traces" if w.traces else w.mode

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> LoopOutcome:  # noqa: C901 (the loop's states: recover, place, wait, drain)
        """Run until the target is met (or the queue is empty) and nothing runs."""
        recovered = tuple(recover(self.study, self.store))
        resumed = False
        confirm_pending = self.settings.n_trials is not None and bool(
            self.study.user_attrs.get(StudyAttr.CONFIRM_PENDING)
        )
        if self.settings.n_trials is not None:
            ensure_baseline(self.study, self.preset.baseline_params())
            if self.settings.also_try_baseline:
                enqueue_baseline_copy(self.study, self.preset.baseline_params())
            if confirm_pending:
                # The search of this command ran before; its confirmation stage was stopped.
                # Searching more first would change the finalists of rounds already run.
                self.target = self._done()
                self.study.set_user_attr(StudyAttr.TARGET, self.target)
                if self.settings.budget is not None:
                    self._base_done = self.target
                    self.settings.budget.trials_before = self._base_done
            elif self.settings.budget is not None:
                # The budget counts this command: its plan's trials, whatever an earlier run
                # left unfinished.
                self._base_done = self._done()
                self.settings.budget.trials_before = self._base_done
                self._set_budget_target(self.settings.n_trials)
            else:
                self.target, resumed = budget_target(self.study, self.settings.n_trials)
            # Stored so the export can say how the search measured its drift.
            self.study.set_user_attr(StudyAttr.BASELINE_EVERY, self.settings.baseline_every)
        if self.settings.timeout_s is not None:
            self._deadline = self.backend.now() + self.settings.timeout_s
        self.display.total = self.target if self.target is not None else len(self._waiting())
        self.display.update(finished=self._done())
        if self.display.lines is not None and self.target is None:
            self.display.lines.queued_stage = True  # the planned runs are used up from here
        while True:
            if self.stop_requested:
                # Set by a signal handler: raised here, between calls, never inside Ray's wait.
                raise KeyboardInterrupt()
            self._beat()
            busy = {r.slot for r in self.inflight.values()}
            for slot in range(self.backend.slots):
                if slot not in busy and self.backend.ready(slot) and self._may_start():
                    # Look again and take the trial under the study's lock: two drivers that
                    # both saw room for the last trial would otherwise both start one.
                    with self._claim():
                        if self._may_start():
                            self._dispatch(slot)
            if not self.inflight:
                if self._awaiting_placement():
                    self.backend.wait(self.settings.poll_s)
                    continue
                if not self._others_running():
                    break
                # Their trials may finish short of the target, or die and come back queued.
                self.backend.wait(max(self.settings.poll_s, 2.0))
                continue
            for finished in self.backend.wait(self.settings.poll_s):
                self._complete(finished)
            self._relay()
        size = len(self.configs) if self.exhausted and self.configs is not None else None
        if self._budget_stopped and self.target is not None:
            # Nothing is left unfinished for a later run to continue: the budget ended it.
            self.study.set_user_attr(StudyAttr.TARGET, self._done())
        return LoopOutcome(
            self.target, resumed, size, recovered, self._budget_stopped, confirm_pending
        )

    def abandon(self) -> None:
        """Ctrl-C or SIGTERM: stop running trials, mark them interrupted, re-queue them."""
        numbers = list(self.inflight)
        for number in numbers:
            self.backend.request_stop(number)
        # Workers stop at the next task boundary, then stop their server; wait a minute. What
        # they measured is dropped: the trial runs again in full from the queue.
        start = self.backend.now()
        while self.inflight and self.backend.now() - start < 60:
            for f in self.backend.wait(self.settings.poll_s):
                self.inflight.pop(f.trial_number, None)
        for number in numbers:
            mark_interrupted(self.study, number, "the run was stopped before this trial finished")
        self.inflight.clear()

    # ---- state ----------------------------------------------------------------------------

    def _trials(self, *, fresh: bool = False) -> list[FrozenTrial]:
        if fresh or self._trials_cache is None:
            self._trials_cache = self.study.get_trials(deepcopy=False)
        return self._trials_cache

    def _waiting(self) -> list[FrozenTrial]:
        return [t for t in self._trials(fresh=True) if t.state == TrialState.WAITING]

    def _done(self) -> int:
        return counted(self._trials())

    def _may_start(self) -> bool:
        if self._deadline is not None and self.backend.now() >= self._deadline:
            return False
        if self.target is None:
            return bool(self._waiting())
        # Decide on fresh data: other drivers on the study start and finish trials too. A
        # cached view that still shows another driver's finished trial running would say "no
        # room", and with nothing of this driver's own in flight the loop would end short of
        # the target and go on to the queued stages while the other driver takes the last trial.
        if self.exhausted or not self._room(self._trials(fresh=True)):
            return False
        return self._budget_allows()

    def _claim(self) -> contextlib.AbstractContextManager[None]:
        """The study's dispatch lock when other drivers may share it (`study_lock`).

        Taken for the queued stages too: a search that queues its proposal and then asks for
        it must not have a driver running queued runs take that proposal in between (Optuna's
        `ask` takes the oldest queued trial; the searching driver would then get a fresh,
        unqueued trial, one more than the target).
        """
        if not self._heartbeat or self.store is None:
            return contextlib.nullcontext()
        from tuner.storage.locks import study_lock

        return study_lock(self.store.url, self.study.study_name, "dispatch")

    def _room(self, trials: list[FrozenTrial]) -> bool:
        """Whether one more sampled trial fits the target, counting every driver's running ones."""
        assert self.target is not None
        running = {t.number for t in trials if t.state == TrialState.RUNNING and is_sampled(t)}
        mine = {n for n, r in self.inflight.items() if r.role in SAMPLED_ROLES}
        return counted(trials) + len(running | mine) < self.target

    def _awaiting_placement(self) -> bool:
        """No slot is placed, a trial is due, and the slots have been waited for less than
        `PLACEMENT_WAIT_S` (a dead worker's replacement is on its way)."""
        if all(self.backend.ready(s) for s in range(self.backend.slots)):
            self._unplaced_since = None
            return False
        if not self._may_start():
            return False
        now = self.backend.now()
        if self._unplaced_since is None:
            self._unplaced_since = now
        if now - self._unplaced_since < PLACEMENT_WAIT_S:
            return True
        if self.display.lines is not None:
            self.display.lines.say(
                f"no worker was placed within {PLACEMENT_WAIT_S:g} s; the queued trials are "
                "left for the next run of the same command"
            )
        return False

    def _others_running(self) -> bool:
        """Another driver still runs sampled trials that the target is waiting for."""
        if self.target is None or self.exhausted:
            return False
        if self._deadline is not None and self.backend.now() >= self._deadline:
            return False
        trials = self._trials(fresh=True)
        return counted(trials) < self.target and any(
            t.state == TrialState.RUNNING and is_sampled(t) and t.number not in self.inflight
            for t in trials
        )

    def _beat(self) -> None:
        now = self.backend.now()
        if now - self._last_beat < HEARTBEAT_INTERVAL_S:
            return
        self._last_beat = now
        if self._heartbeat:
            for run in self.inflight.values():
                self._storage.record_heartbeat(run.trial._trial_id)
            # Other drivers' dead trials come back to the queue while this one runs.
            if recover(self.study, self.store):
                self._trials_cache = None
        self._trials_cache = None  # other drivers may have finished trials meanwhile

    # ---- dispatch -------------------------------------------------------------------------

    def _dispatch(self, slot: int) -> None:
        # Each pass either runs a trial, consumes a queued duplicate, or queues a proposal.
        for _ in range(100):
            trials = self._trials(fresh=True)
            if self.target is not None and rerun_due(trials, self.settings.baseline_every):
                # Before the next proposal: the baseline again, so the trials between two of
                # its starts are scored against its drift-corrected rate (tuner.metrics.drift).
                enqueue_baseline_rerun(self.study, self.preset.baseline_params())
                trials = self._trials(fresh=True)
            if not any(t.state == TrialState.WAITING for t in trials):
                if self.target is None:
                    return
                params = propose(
                    trials,
                    self.preset,
                    seed=self.settings.seed,
                    n_trials=self.target,
                    configs=self.configs,
                    sampler_factory=self.settings.sampler_factory,
                )
                if params is None:
                    self.exhausted = True
                    return
                self.study.enqueue_trial(
                    params, user_attrs={TrialAttr.ROLE: Role.CANDIDATE}, skip_if_exists=False
                )
            trial = ask(self.study)
            if self._heartbeat:
                self._storage.record_heartbeat(trial._trial_id)
            trial.set_user_attr(TrialAttr.DRIVER, self._driver)
            params = self.preset.suggest(trial)
            if TrialAttr.ROLE not in trial.user_attrs:
                trial.set_user_attr(TrialAttr.ROLE, Role.CANDIDATE)
            role = str(trial.user_attrs[TrialAttr.ROLE])
            copy = TrialAttr.COPY_OF in trial.user_attrs  # an A/A copy repeats on purpose
            if role in SAMPLED_ROLES and not copy and self._reject_duplicate(trial, params, trials):
                continue
            self._start(slot, trial, params, role)
            return
        raise RuntimeError("the study queue kept yielding duplicates")  # pragma: no cover

    def _reject_duplicate(
        self, trial: optuna.Trial, params: dict[str, Any], trials: list[FrozenTrial]
    ) -> bool:
        """A queued run repeating a sampled trial's config: FAIL it, uncounted, unseen by TPE."""
        others = [t for t in trials if t.number != trial.number]
        if config_key(params) not in taken_configs(others):
            return False
        original = next(
            t.number
            for t in others
            if is_sampled(t) and config_key(dict(t.params)) == config_key(params)
        )
        trial.set_user_attr(TrialAttr.DUPLICATE_OF, original)
        trial.set_user_attr(TrialAttr.FAILURE_KIND, "duplicate")
        trial.set_user_attr(
            TrialAttr.FAILURE_REASON, f"repeats trial {original}'s config; not run again"
        )
        self.study.tell(trial, state=TrialState.FAIL)
        return True

    def _start(self, slot: int, trial: optuna.Trial, params: dict[str, Any], role: str) -> None:
        self.backend.submit(slot, self.make_request(trial, params))
        self._began[trial.number] = self.backend.now()
        if self.settings.budget is not None:
            self.settings.budget.run_started()
        self.inflight[trial.number] = _Running(slot, trial, role)
        label = describe_config_short(params)
        self.display.slots[slot : slot + 1] = [
            SlotView(trial=trial.number, label=label, state="starting")
        ]
        if self.display.lines is not None:
            self.display.lines.started(trial.number, trial.user_attrs, label)
        self.display.update()

    # ---- results ----------------------------------------------------------------------------

    def _complete(self, finished: Finished) -> None:
        run = self.inflight.pop(finished.trial_number, None)
        if run is None:
            return
        if finished.node_id is not None:
            run.trial.set_user_attr(TrialAttr.RAY_NODE, finished.node_id)
        if finished.result is None:
            trial = run.trial
            # A lost node is not the config's doing: interrupted, queued again every time.
            kind = "interrupted" if finished.node_lost else "worker_crashed"
            trial.set_user_attr(TrialAttr.FAILURE_KIND, kind)
            trial.set_user_attr(TrialAttr.FAILURE_REASON, finished.crash or "the worker died")
            self.study.tell(trial, state=TrialState.FAIL)
            requeue(
                self.study,
                self.study._storage.get_trial(trial._trial_id),
                interrupted=finished.node_lost,
            )
        else:
            record_result(self.study, run.trial, self.store, finished.result)
        self.reported.pop(finished.trial_number, None)
        self._trials_cache = None
        began = self._began.pop(finished.trial_number, None)
        if self.settings.budget is not None and began is not None:
            self._budget_measure(run, finished, self.backend.now() - began)
        if run.slot < len(self.display.slots):
            self.display.slots[run.slot] = SlotView()
        self.display.best = _best_line(self._trials(), tph_label(self._mode))
        self.display.update(finished=self._done())
        if self.display.lines is not None:
            self._say_finished(run, counted=finished.result is not None)
