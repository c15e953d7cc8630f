"""How a trial reads a failed workload: did its server die, and in what words.

A workload error seen from the client (a dropped connection, HTTP 500s, nothing answered) is
often a server that died; `unless_died` then gives the death in the server's own words (the
log's root cause, `tuner.server.crashes`), infeasible when it died at its first request, and
otherwise the client's failure as given. `server_errors`, `answered_requests` and
`first_failure` read a workload record for `tuner.study.trial.evaluate`.
"""

from __future__ import annotations

import re
from typing import Any

from tuner.records import WorkloadRecord

__all__ = [
    "DEATH_WAIT_S",
    "answered_requests",
    "first_failure",
    "server_errors",
    "unless_died",
]

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
) -> tuple[str, str, bool]:
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
