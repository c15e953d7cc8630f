"""Why a vLLM server did not start: failure classes, read from vLLM's own log messages.

`classify(log_text, exit_code, timed_out)` turns a failed start into a `StartupFailure` that
carries the class, vLLM's message, the numbers in it (requested and available Mamba blocks,
the estimated maximum model length, ...), the relevant log lines and the log path. The texts
matched are vLLM 0.32's (docs/vllm-facts.md); anything unrecognised is `crashed` with the
last 40 log lines.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from typing import Any

from tuner.errors import ServerError
from tuner.records import ServerStartRecord
from tuner.server.crashes import PYDANTIC_SUFFIX, root_cause

__all__ = ["FailureKind", "StartupFailed", "StartupFailure", "classify"]

TAIL_LINES = 40


class FailureKind(enum.StrEnum):
    """The classes of failed starts; the study treats the infeasible ones as pruned configs."""

    MAMBA_BLOCKS_EXCEEDED = "mamba_blocks_exceeded"
    CONTEXT_TOO_LONG = "context_too_long"
    NO_CACHE_MEMORY = "no_cache_memory"
    WEIGHTS_OOM = "weights_oom"
    SAMPLER_OOM = "sampler_oom"
    INSUFFICIENT_FREE_MEMORY = "insufficient_free_memory"
    INVALID_SPECULATIVE_CONFIG = "invalid_speculative_config"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASHED = "crashed"


# A config that cannot run on this model and card, whatever is retried: the search should
# learn from it rather than count it as a broken trial. The Mamba class is left out on purpose:
# lowering max_num_seqs to the reported number makes that config start.
INFEASIBLE = frozenset(
    {
        FailureKind.CONTEXT_TOO_LONG,
        FailureKind.NO_CACHE_MEMORY,
        FailureKind.WEIGHTS_OOM,
        FailureKind.SAMPLER_OOM,
        FailureKind.INSUFFICIENT_FREE_MEMORY,
        FailureKind.INVALID_SPECULATIVE_CONFIG,
    }
)


@dataclass(frozen=True)
class StartupFailure:
    """A start that never reached /health 200: its class, vLLM's message and numbers, the log."""

    kind: FailureKind
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    excerpt: str = ""
    log_path: str = ""
    exit_code: int | None = None
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float | None = None
    attempt: int = 0

    @property
    def infeasible(self) -> bool:
        """True when this config cannot start here at all (not a flaky or retryable failure)."""
        return self.kind in INFEASIBLE

    def summary(self) -> str:
        """One line: what failed and vLLM's reason."""
        message = self.message if len(self.message) <= 300 else self.message[:297] + "..."
        return f"vLLM server did not start ({self.kind.value}): {message}"

    def record(self, *, attempt: int | None = None) -> ServerStartRecord:
        """The row the driver stores for this attempt (the launch's attempt unless given)."""
        return ServerStartRecord(
            argv=self.argv,
            env=dict(self.env),
            log_path=self.log_path,
            attempt=self.attempt if attempt is None else attempt,
            started_at=self.started_at,
            ended_at=self.ended_at,
            exit_status=self.exit_code,
            failure_kind=self.kind.value,
            failure_message=self.message,
            failure_excerpt=self.excerpt,
            failure_details=dict(self.details),
        )

    def with_context(self, **changes: Any) -> StartupFailure:
        """A copy with the launch context (argv, env, times, log path) filled in."""
        return replace(self, **changes)


_NUM = r"([\d,]+)"
_GIB = r"([\d.]+)"


@dataclass(frozen=True)
class _Pattern:
    kind: FailureKind
    regex: re.Pattern[str]
    fields: tuple[str, ...] = ()


# Ordered: the first match wins. Message texts are vLLM 0.32's (see module docstring).
_PATTERNS = (
    _Pattern(
        FailureKind.MAMBA_BLOCKS_EXCEEDED,
        re.compile(
            rf"max_num_seqs \({_NUM}\) exceeds available Mamba cache blocks \({_NUM}\)[^\n]*"
        ),
        ("requested", "available"),
    ),
    _Pattern(
        FailureKind.CONTEXT_TOO_LONG,
        re.compile(
            rf"To serve at least one request with the model's max seq len \({_NUM}\), "
            rf"\({_GIB} GiB KV cache is needed, which is larger than the available KV cache "
            rf"memory \({_GIB} GiB\)\.(?: Based on the available memory, the estimated maximum "
            rf"model length is {_NUM}\.)?[^\n]*"
        ),
        ("max_model_len", "needed_gib", "available_gib", "estimated_max_model_len"),
    ),
    _Pattern(
        FailureKind.NO_CACHE_MEMORY,
        re.compile(
            r"(?:No available memory for the cache blocks\.|Cannot auto-fit max_model_len: "
            r"not enough GPU memory)[^\n]*"
        ),
    ),
    _Pattern(
        FailureKind.WEIGHTS_OOM,
        re.compile(r"Failed to load model - not enough GPU memory\.[^\n]*"),
    ),
    _Pattern(
        FailureKind.SAMPLER_OOM,
        re.compile(rf"CUDA out of memory occurred when warming up sampler with {_NUM}[^\n]*"),
        ("num_reqs",),
    ),
    _Pattern(
        FailureKind.INSUFFICIENT_FREE_MEMORY,
        re.compile(
            rf"Free memory on device[^(\n]*\({_GIB}/{_GIB} GiB\) on startup[^\n]*?"
            rf"(?:desired GPU memory utilization|engine's budget)[^(\n]*\(([\d.]+), {_GIB} GiB\)"
            r"[^\n]*"
        ),
        ("free_gib", "total_gib", "gpu_memory_utilization", "requested_gib"),
    ),
    # The CPU build's form: the NUMA node has less free memory than the worker asked for.
    _Pattern(
        FailureKind.INSUFFICIENT_FREE_MEMORY,
        re.compile(
            rf"Available memory on node \d+ \({_GIB}/{_GIB} GiB\) on kv cache allocation is "
            rf"less than requested memory for kv \({_GIB}/{_GIB} GiB\)[^\n]*"
        ),
        ("free_gib", "total_gib", "requested_kv_gib", "requested_gib"),
    ),
    # The same check when `--kv-cache-memory-bytes` sets the size (what CPU presets search):
    # vLLM then names only the KV size it was asked for (vllm/v1/worker/cpu_worker.py).
    _Pattern(
        FailureKind.INSUFFICIENT_FREE_MEMORY,
        re.compile(
            rf"Available memory on node \d+ \({_GIB}/{_GIB} GiB\) on kv cache allocation is "
            rf"less than requested memory for kv \({_GIB} GiB\)[^\n]*"
        ),
        ("free_gib", "total_gib", "requested_kv_gib"),
    ),
)

# vLLM reports a rejected `--speculative-config` as a pydantic error of SpeculativeConfig (one
# "N validation error(s) for SpeculativeConfig" header, then the field and the reason) or as a
# ValueError raised while the config is built.
_SPEC_HEADER = re.compile(r"\d+ validation errors? for SpeculativeConfig")
_SPEC_VALUE_ERROR = re.compile(
    r"(?:ValueError|NotImplementedError|ImportError): ([^\n]*(?:speculative|prompt_lookup|"
    r"num_speculative_tokens|draft|Arctic Inference|MTP|mtp|eagle)[^\n]*)"
)
_PYDANTIC_LOC = re.compile(r"^[\w.\[\]-]+$")


def _number(text: str | None) -> int | float | None:
    if text is None:
        return None
    cleaned = text.replace(",", "")
    return float(cleaned) if "." in cleaned else int(cleaned)


def _lines_around(lines: list[str], index: int, before: int = 3, after: int = 3) -> str:
    return "\n".join(lines[max(0, index - before) : index + after + 1])


def _find_line(lines: list[str], needle: str) -> int:
    for i in range(len(lines) - 1, -1, -1):
        if needle in lines[i]:
            return i
    return max(0, len(lines) - 1)


def _speculative_failure(text: str, lines: list[str]) -> tuple[str, str] | None:
    header = _SPEC_HEADER.search(text)
    if header is not None:
        start = _find_line(lines, header.group(0))
        block = [lines[start]]
        for line in lines[start + 1 : start + 12]:
            # The block ends at the first flush-left line that is not another error's location.
            after_reason = len(block) > 1 and block[-1].startswith(" ")
            if not line.startswith((" ", "\t")) and after_reason and not _PYDANTIC_LOC.match(line):
                break
            block.append(line)
        # pydantic prints "loc" lines flush left and the reason indented, then a link.
        parts = [
            PYDANTIC_SUFFIX.sub("", ln.strip())
            for ln in block[1:]
            if ln.strip() and "errors.pydantic" not in ln
        ]
        message = ": ".join([header.group(0), *parts])
        return message, "\n".join(block)
    found = _SPEC_VALUE_ERROR.search(text)
    if found is not None:
        index = _find_line(lines, found.group(1))
        return found.group(1).strip(), _lines_around(lines, index, before=6, after=1)
    return None


# vLLM's memory profile before the "No available memory" error (vllm/v1/worker/gpu_worker.py):
# the KV budget left after weights, activations and CUDA graphs, negative when they do not fit.
_KV_BUDGET = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")


def _with_kv_budget(log_text: str, message: str, details: dict[str, Any]) -> str:
    """vLLM's own number beside its message: how far the budget fell short."""
    budgets = _KV_BUDGET.findall(log_text)
    if not budgets:
        return message
    details["available_kv_gib"] = float(budgets[-1])
    return f"{message} (vLLM: available KV cache memory {budgets[-1]} GiB)"


def classify(
    log_text: str, exit_code: int | None, timed_out: bool, *, log_path: str = ""
) -> StartupFailure:
    """Classify a failed start from its log, exit code and whether we gave up waiting.

    Args:
        log_text: The server's combined stdout and stderr.
        exit_code: The process's exit status, None if it was still running.
        timed_out: True when /health never answered 200 within the launch timeout.
        log_path: Where the log lives, carried into the failure for the user.

    Returns:
        The failure, with vLLM's message, the numbers it names and the relevant log lines.
    """
    lines = log_text.splitlines()
    for pattern in _PATTERNS:
        found = pattern.regex.search(log_text)
        if found is None:
            continue
        details = {
            name: _number(value)
            for name, value in zip(pattern.fields, found.groups(), strict=False)
            if value is not None
        }
        index = _find_line(lines, found.group(0)[:60])
        message = found.group(0).strip()
        if pattern.kind is FailureKind.NO_CACHE_MEMORY:
            message = _with_kv_budget(log_text, message, details)
        return StartupFailure(
            kind=pattern.kind,
            message=message,
            details=details,
            excerpt=_lines_around(lines, index),
            log_path=log_path,
            exit_code=exit_code,
        )
    speculative = _speculative_failure(log_text, lines)
    if speculative is not None:
        message, excerpt = speculative
        return StartupFailure(
            kind=FailureKind.INVALID_SPECULATIVE_CONFIG,
            message=message,
            excerpt=excerpt,
            log_path=log_path,
            exit_code=exit_code,
        )
    tail = "\n".join(lines[-TAIL_LINES:])
    if timed_out:
        return StartupFailure(
            kind=FailureKind.STARTUP_TIMEOUT,
            message="/health did not answer 200 before the startup timeout",
            excerpt=tail,
            log_path=log_path,
            exit_code=exit_code,
        )
    reason = root_cause(log_text) or (lines[-1].strip() if lines else "no output")
    return StartupFailure(
        kind=FailureKind.CRASHED,
        message=f"exited with status {exit_code}: {reason}",
        details={"exit_code": exit_code},
        excerpt=tail,
        log_path=log_path,
        exit_code=exit_code,
    )


class StartupFailed(ServerError):
    """The server did not become ready; `failure` says why, in vLLM's own numbers."""

    def __init__(self, failure: StartupFailure) -> None:
        super().__init__(failure.summary(), log_path=failure.log_path)
        self.failure = failure

    def __reduce__(self) -> tuple[type[StartupFailed], tuple[StartupFailure]]:
        # Ray pickles exceptions; rebuild from the failure, not from the message string.
        return (type(self), (self.failure,))
