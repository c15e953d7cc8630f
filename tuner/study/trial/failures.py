"""How a trial reads a failed workload: did its server die, and in what words.

A workload error seen from the client (a dropped connection, HTTP 500s, nothing answered) is
often a server that died; `unless_died` then gives the death in the server's own words (the
log's root cause, `tuner.server.crashes`), infeasible when it died at its first request, and
otherwise the client's failure as given. `workload_failure` reads a workload's error and
`workload_lost` a finished workload that measured nothing, for every workload a trial runs (the
search's one, a load sweep's several: `tuner.study.trial.evaluate`, `tuner.study.trial.loads`);
`server_errors`, `answered_requests` and `first_failure` read a workload record.
"""

from __future__ import annotations

import re
from typing import Any

from tuner.errors import WorkloadStalled
from tuner.metrics.guards import AcceptanceCollapsed
from tuner.records import WorkloadRecord

__all__ = [
    "DEATH_WAIT_S",
    "Failure",
    "answered_requests",
    "first_failure",
    "one_line",
    "server_errors",
    "unless_died",
    "workload_failure",
    "workload_lost",
]

# (failure kind, reason, infeasible): how a trial's failure is reported.
Failure = tuple[str, str, bool]

# A server whose engine died answers HTTP 500 for a moment before its API server exits.
DEATH_WAIT_S = 20.0


def unless_died(
    handle: Any,
    answered: int | None,
    kind: str,
    reason: str,
    infeasible: bool,
    *,
    wait_s: float = 5.0,
) -> Failure:
    """(failure kind, reason, infeasible) of a failed workload, unless the server died: then
    its death in its own words (the log's root cause, not the client's error), infeasible when
    it died at its first request."""
    death = handle.death(answered, wait_s=wait_s)
    if death is None:
        return kind, reason, infeasible
    return death.kind, death.reason, death.infeasible


_SERVER_ERROR = re.compile(r"\bHTTP 5\d\d\b")


def server_errors(workload: WorkloadRecord) -> bool:
    """Whether a task failed on an HTTP 5xx answer (warm-up included)."""
    return any(_SERVER_ERROR.search(t.failure_reason or "") for t in workload.task_records)


def answered_requests(workload: WorkloadRecord) -> int:
    """Requests the server answered, warm-up included."""
    return sum(len(t.steps) for t in workload.task_records)


def first_failure(workload: WorkloadRecord) -> str:
    """The first failure reason a task recorded, warm-up included."""
    reasons = [t.failure_reason for t in workload.task_records if t.failure_reason]
    return reasons[0] if reasons else "no task recorded a reason"


def workload_failure(handle: Any, exc: Exception) -> Failure:
    """A workload that raised `exc` (a `TunerError` or an `httpx.HTTPError`), read as a failure.

    Call it after the abort check: an error the interrupt's stop caused is no failure.
    """
    if isinstance(exc, AcceptanceCollapsed):
        # Drafting on, accepting nothing: a broken config here, never a slow one.
        return unless_died(
            handle, exc.answered_requests, "acceptance_collapsed", str(exc), True, wait_s=0.5
        )
    if isinstance(exc, WorkloadStalled):
        # Alive but not finishing tasks: this config cannot serve the workload here, so it is
        # infeasible (the sampler steers away) unless the server in fact died.
        return unless_died(
            handle, exc.answered_requests, "server_stalled", f"the vLLM server {exc}", True
        )
    return unless_died(
        handle,
        getattr(exc, "answered_requests", None),
        "workload_failed",
        f"the workload failed against the server: {exc}",
        False,
    )


def workload_lost(handle: Any, workload: WorkloadRecord) -> Failure | None:
    """Why a workload that ran to its end measured nothing, or None when it measured.

    Not one request answered: no measurement. On the vLLM CPU build the tiny hybrid's engine
    core dies at its first request while the API server answers HTTP 500 ("EngineCore
    encountered an issue") until it exits: its own cause. HTTP 5xx answers, then the server
    exits: vLLM's API server answers 500 for a moment after its engine core died. A crash, in
    its own words, not a config that fails some tasks; a server that lives on keeps its score.
    """
    if answered_requests(workload) == 0:
        return unless_died(
            handle,
            0,
            "workload_failed",
            "the server answered none of the workload's requests: " + first_failure(workload),
            False,
            wait_s=DEATH_WAIT_S,
        )
    if server_errors(workload):
        death = handle.death(answered_requests(workload), wait_s=DEATH_WAIT_S)
        if death is not None:
            return death.kind, death.reason, death.infeasible
    return None


def one_line(exc: BaseException) -> str:
    """An error as the one line a note on a result gives it."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
