"""Why a vLLM process failed, in its own words: the root cause in a log, and deaths under load.

`root_cause(log)` finds the most specific error a vLLM log holds (the first exception raised,
in whichever process raised it), not the wrapper printed last ("Engine core initialization
failed. See root cause above") nor the shutdown noise after it (resource_tracker warnings).
`server_death()` says why a server that was ready died while it served the workload; one that
died at its first request cannot serve this config here, so the trial is infeasible. Checked on
real CPU-build logs kept in tests/assets/logs/.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

__all__ = ["PYDANTIC_SUFFIX", "ServerDeath", "root_cause", "server_death"]

PYDANTIC_SUFFIX = re.compile(r"\s*\[type=[^\]]*\]?.*$")
# vLLM prefixes its lines with the process and the logger: "(EngineCore_DP0 pid=12) ERROR
# 11-29 09:34:54 [core.py:1510] ". Tracebacks keep their own indentation after the prefix.
_PROC_PREFIX = re.compile(r"^\((?:[\w.-]+) pid=\d+\) ")
_LOG_PREFIX = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ \[[^\]]*\] ")
# An exception line as Python prints it: a class name (dotted module allowed), then its message.
_EXCEPTION_LINE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?:: (.*))?$"
)
# argparse's "prog: error: argument --x: invalid choice: ..." (an unknown flag or value).
_USAGE_LINE = re.compile(r"^[\w.-]+: error: (.+)$")
# Wrappers that point elsewhere instead of naming the cause; the cause is printed before them.
_GENERIC = (
    "Engine core initialization failed",
    "See root cause above",
    "EngineCore encountered an issue",
    "EngineDeadError",
    "CancelledError",
    "KeyboardInterrupt",
    "SystemExit",
    "APIServerProcessError",
)
_MAX_CAUSE = 400


def _bare(line: str) -> str:
    """A log line without vLLM's process and logger prefixes (indentation kept)."""
    return _LOG_PREFIX.sub("", _PROC_PREFIX.sub("", line))


def root_cause(log_text: str) -> str | None:
    """The most specific error in a vLLM log: "Type: message" of the failing process.

    vLLM's last lines are wrappers ("RuntimeError: Engine core initialization failed. See root
    cause above") or shutdown noise (resource_tracker warnings); the cause is the first
    exception raised, in whichever process raised it (the engine core prints its traceback
    before the API server prints the wrapper; in a chain, the first traceback is the cause).
    Generic wrappers and exceptions without a message are skipped; an argparse usage error
    (an unknown flag or value) counts as an error too.

    Returns:
        One line, at most 400 characters, or None when the log holds no error.
    """
    lines = [_bare(line) for line in log_text.splitlines()]
    fallback: str | None = None
    for i, line in enumerate(lines):
        usage = _USAGE_LINE.match(line)
        if usage is not None:
            return _clip(f"error: {usage.group(1)}")
        found = _EXCEPTION_LINE.match(line)
        if found is None:
            continue
        name, message = found.group(1), (found.group(2) or "").strip()
        short = name.rsplit(".", 1)[-1]
        if any(g in line for g in _GENERIC):
            continue
        if not message:
            fallback = fallback or short
            continue
        if message.endswith(":") or re.fullmatch(r"\d+ validation errors? for \w+", message):
            # pydantic and friends put the detail on the next non-empty lines.
            detail = [ln.strip() for ln in lines[i + 1 : i + 4] if ln.strip()]
            detail = [d for d in detail if "errors.pydantic.dev" not in d][:2]
            message = " ".join([message, *detail])
        return _clip(f"{short}: {PYDANTIC_SUFFIX.sub('', message)}")
    return fallback


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CAUSE else text[: _MAX_CAUSE - 3] + "..."


@dataclass(frozen=True)
class ServerDeath:
    """A server that was ready and then died while it served the workload.

    Attributes:
        kind: "server_died" (answered nothing: the config cannot serve here, so the trial is
            infeasible and the sampler steers away) or "server_crashed" (died mid-run).
        reason: One line: when it died, its exit status, and the root cause from its log.
        infeasible: True for a server that died at its first request.
        log_path: The server's log.
    """

    kind: str
    reason: str
    infeasible: bool
    log_path: str = ""


def _exit_words(exit_code: int | None) -> str:
    if exit_code is None:
        return "still running"
    if exit_code < 0:
        try:
            return f"killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"killed by signal {-exit_code}"
    return f"exit status {exit_code}"


def server_death(
    log_text: str, exit_code: int | None, answered_requests: int | None, *, log_path: str = ""
) -> ServerDeath:
    """Why a ready server died under load, in its own words (see `root_cause`).

    Args:
        log_text: The server's log.
        exit_code: Its exit status (negative: the signal that killed it).
        answered_requests: Requests it answered before dying; 0 means it died at its first
            request (e.g. the tiny hybrid model with prefix caching on the CPU build); None
            when unknown.
        log_path: Where the log lives.
    """
    cause = root_cause(log_text)
    if cause is None and exit_code is not None and exit_code < 0:
        cause = "no error in its log: it was killed from outside (the OOM killer, or a user)"
    first = answered_requests == 0
    when = (
        "at its first request"
        if first
        else "during the workload"
        + (f" after {answered_requests} answered requests" if answered_requests else "")
    )
    cause = cause or "no error in its log"
    reason = f"the vLLM server died {when} ({_exit_words(exit_code)}): {cause}"
    return ServerDeath(
        kind="server_died" if first else "server_crashed",
        reason=reason,
        infeasible=first,
        log_path=log_path,
    )
