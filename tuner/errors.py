"""The errors `tuner` raises on purpose, and how the CLI shows them.

Every error a user can cause or meet is one of these. Each carries one line that says what
failed, why, and what to do; the CLI prints that line (and a log path where there is one) and
exits with code 2, never with a traceback.

```
TunerError
├── ConfigError           bad input: a CLI option, a preset, a search-space file, a setting
├── StorageError          the database URL cannot be used (driver, host, permissions, schema)
├── ModelPrepError        a test model cannot be built (missing package, unwritable cache)
├── ServerError           a vLLM server could not be started, watched or stopped
│   └── StartupFailed     the server exited or timed out before /health; carries the failure
│                         (defined in tuner.server.failures, beside the failure it carries)
├── WorkloadError         the workload cannot run (bad traces file, server unreachable)
└── StudyError            the study cannot run or report (no such study, no finished trial)
```
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


__all__ = [
    "ConfigError",
    "ModelPrepError",
    "ServerError",
    "StorageError",
    "StudyError",
    "TunerError",
    "WorkloadError",
    "first_error",
]


class TunerError(Exception):
    """Base class: one clear line for the user, and optionally the log to read."""

    def __init__(self, message: str, *, log_path: Path | str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.log_path = Path(log_path) if log_path is not None else None

    def user_line(self) -> str:
        """The single line the CLI prints."""
        if self.log_path is not None:
            return f"{self.message} (log: {self.log_path})"
        return self.message


class ConfigError(TunerError):
    """A CLI option, preset, search space or setting is invalid."""


class StorageError(TunerError):
    """The storage URL cannot be opened or migrated."""


class ModelPrepError(TunerError):
    """A test model cannot be prepared."""


class ServerError(TunerError):
    """A vLLM server could not be started, watched or stopped."""


class WorkloadError(TunerError):
    """The agent workload cannot run; `answered_requests` counts what the server did answer."""

    def __init__(
        self,
        message: str,
        *,
        log_path: Path | str | None = None,
        answered_requests: int | None = None,
    ) -> None:
        super().__init__(message, log_path=log_path)
        self.answered_requests = answered_requests


class WorkloadStalled(WorkloadError):
    """Every agent's latest task missed its deadline in a row: the server is stalled or far too
    slow for this workload, and waiting out the rest of the tasks would take hours."""


class StudyError(TunerError):
    """The study cannot run, resume, export or report."""


def first_error(exc: ValidationError) -> tuple[str, str]:
    """Pydantic's first error as (where, message): the dotted field path ("" at the top level)
    and pydantic's message, for one line to the user."""
    first = exc.errors()[0]
    return ".".join(str(p) for p in first.get("loc", ())), str(first.get("msg", ""))
