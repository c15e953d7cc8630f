"""The execution seam: how the study loop runs trials, without knowing Ray or vLLM.

The loop (`tuner.study.search.loop.StudyLoop`) owns everything Optuna: the sampler, the pruner rule,
duplicates, constraints, the budget and every database write. A backend only runs
`TrialRequest`s and reports on them. Four exist (tests/integration/test_trial_backend_contract.py
holds each to the clauses below):

- `tuner.study.trial.workers.RayBackend`: one Ray actor per GPU slot, each starting a real
  `vllm serve` (what `tuner optimize` and the load sweep use);
- `tuner.study.search.sizing_backend.SizingBackend`, which wraps any backend for the driver;
- `tuner.testing.scripted_backend.ScriptedBackend`, trials scripted on a simulated clock for tests;
- the grid replay (benchmarks/_grid_replay.py) that answers from recorded trials on a simulated
  clock, so hundreds of seeded studies replay in minutes with the same loop.

The protocol, as the loop uses it:

1. `slots`: how many trials may run at once. The loop keeps each idle slot busy.
2. `submit(slot, request)`: start a trial on an idle slot; returns at once.
3. `wait(timeout_s)`: block until at least one trial has finished or `timeout_s` of backend
   time has passed, and return the finished ones (`Finished`: the `TrialResult`, or a one-line
   `crash` when the worker itself died; the loop re-queues a crashed trial once, and a trial
   whose node was lost every time, as interrupted). A simulated
   backend may return at its next event instead (a task finished), advancing its clock.
4. `progress()`: a snapshot of every running trial (`Progress`: its phase and, once the scored
   tasks run, tasks done/total, successes and elapsed seconds). The loop reports it to Optuna
   and asks the pruner rule; it calls `progress()` after every `wait()`.
5. `request_stop(trial_number)`: ask a running trial to stop at its next task boundary (the
   pruner decided, or the user pressed Ctrl-C); its result then comes back through `wait()`
   with `TrialResult.pruned` set and the tasks it finished.
6. `ready(slot)` (optional; True when absent): whether the slot can take a trial now. A Ray
   slot whose node was lost waits for its replacement worker to be placed somewhere.
7. `now()`: the backend's clock in seconds (monotonic); the loop's `--timeout` uses it.
8. `close()`: stop everything; no server outlives it.
9. `abort()` (optional; the driver calls it when Ctrl-C or SIGTERM stops the study, before
   the loop's `abandon`): every running trial stops now, not at a task boundary, in whatever
   phase it is (its server stopped at once), and comes back through `wait()` within seconds
   (`tuner.study.trial.workers.ABORT_WAIT_S`); what it measured is not to be stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tuner.study.trial.request import TrialRequest, TrialResult

__all__ = ["Finished", "Progress", "TrialBackend"]


@dataclass(frozen=True)
class Progress:
    """What a running trial reported last."""

    state: str  # "starting", "workload", "throughput", "stopping", ...
    tasks_done: int = 0
    tasks_total: int = 0
    successes: int = 0
    elapsed_s: float = 0.0
    tasks_per_hour: float | None = None
    ready: bool = False  # the server answered /health (the progress lines say so once)
    kv_cache_tokens: int | None = None
    startup_s: float | None = None


@dataclass(frozen=True)
class Finished:
    """A trial that came back: its result, or why its worker could not return one."""

    slot: int
    trial_number: int
    result: TrialResult | None
    crash: str | None = None  # one line, when the worker process died
    # The Ray node that ran it (None where the backend has no nodes, e.g. a simulation).
    node_id: str | None = None
    # The worker died because its whole node was lost (not the config's doing): the loop
    # records the trial interrupted and queues it again, like a killed driver's.
    node_lost: bool = False


class TrialBackend(Protocol):
    """Runs trials for the study loop (see the module docstring for the contract)."""

    @property
    def slots(self) -> int:
        """Trials that may run at once."""
        ...

    def ready(self, slot: int) -> bool:
        """Whether the slot can take a trial now (a Ray slot whose worker lost its node waits
        until its replacement is placed; a trial submitted before would wait with it)."""
        ...

    def submit(self, slot: int, request: TrialRequest) -> None:
        """Start `request` on an idle slot."""
        ...

    def wait(self, timeout_s: float) -> list[Finished]:
        """Trials finished since the last call (possibly none after `timeout_s`)."""
        ...

    def progress(self) -> dict[int, Progress]:
        """The latest progress of each running trial, by trial number."""
        ...

    def request_stop(self, trial_number: int) -> None:
        """Ask a running trial to stop at its next task boundary."""
        ...

    def now(self) -> float:
        """The backend's clock, in seconds."""
        ...

    def close(self) -> None:
        """Stop every trial and release every resource."""
        ...
