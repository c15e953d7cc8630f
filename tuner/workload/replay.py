"""Replay scripts: a conversation the harness plays turn by turn with forced turn lengths.

A script comes from a generated task (its oracle, rendered in the chosen tool protocol) or from
one line of a user's traces file (`--traces FILE.jsonl`: one conversation of OpenAI chat
messages per line, either a JSON list of messages or `{"messages": [...], "tools": [...]}`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import WorkloadError
from tuner.workload.prompt import (
    assistant_message,
    final_message,
    openai_tools,
    system_prompt,
    tool_result_message,
)
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import Task

__all__ = ["ReplayScript", "ReplayTurn", "load_traces", "opening_messages", "script_for_task"]

_ROLES = {"system", "user", "assistant", "tool", "developer"}


@dataclass(frozen=True)
class ReplayTurn:
    """One assistant turn and the messages that follow it (tool results, the next user turn).

    Attributes:
        assistant: The scripted assistant message appended after the model answered.
        text: What the model would have written (content and tool calls): its token count is
            the forced length of this turn.
        followups: Messages appended after the assistant message.
        tool_calls: Tool calls in the turn (each costs one simulated tool latency).
    """

    assistant: dict[str, Any]
    text: str
    followups: tuple[dict[str, Any], ...]
    tool_calls: int


@dataclass(frozen=True)
class ReplayScript:
    """A whole conversation to replay: the opening messages, then the assistant turns."""

    task_id: str
    template: str
    seed: int
    head: tuple[dict[str, Any], ...]
    turns: tuple[ReplayTurn, ...]
    tools: tuple[dict[str, Any], ...] | None


def opening_messages(task: Task, settings: WorkloadSettings) -> list[dict[str, Any]]:
    """The system prompt (shared prefix) and the task's instruction."""
    return [
        {"role": "system", "content": system_prompt(settings.shape, settings.tool_protocol)},
        {"role": "user", "content": task.instruction},
    ]


def script_for_task(task: Task, settings: WorkloadSettings) -> ReplayScript:
    """The oracle of `task` as a replay script in `settings.tool_protocol`."""
    protocol = settings.tool_protocol
    turns: list[ReplayTurn] = []
    for index, step in enumerate(task.steps):
        if step.call is None:
            message = final_message(step.text)
            turns.append(ReplayTurn(message, step.text, (), 0))
            continue
        message = assistant_message(protocol, index, step.text, step.call.tool, step.call.arguments)
        result = tool_result_message(protocol, f"call_{index}", step.call.tool, step.output or "")
        turns.append(ReplayTurn(message, _turn_text(message), (result,), 1))
    tools = tuple(openai_tools()) if protocol == "tools" else None
    head = tuple(opening_messages(task, settings))
    return ReplayScript(task.task_id, task.template, task.seed, head, tuple(turns), tools)


def _turn_text(message: dict[str, Any]) -> str:
    """The text a model writes for an assistant message: content plus its tool calls."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        name, arguments = function.get("name"), function.get("arguments")
        parts.append(json.dumps({"name": name, "arguments": arguments}))
    return "\n".join(p for p in parts if p)


def _fail(path: Path, line: int, why: str) -> WorkloadError:
    return WorkloadError(f"traces file {path} line {line}: {why}")


def _parse_line(path: Path, number: int, raw: str) -> ReplayScript:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _fail(path, number, f"not JSON ({exc.msg} at column {exc.colno})") from None
    tools = None
    if isinstance(data, dict):
        tools = data.get("tools")
        data = data.get("messages")
        if tools is not None and not isinstance(tools, list):
            raise _fail(path, number, '"tools" must be a list of OpenAI tool schemas')
    if not isinstance(data, list) or not data:
        raise _fail(path, number, 'expected a list of messages or {"messages": [...]}')
    head: list[dict[str, Any]] = []
    turns: list[ReplayTurn] = []
    for i, message in enumerate(data):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise _fail(path, number, f"message {i} needs a role among {sorted(_ROLES)}")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _fail(path, number, f"message {i} content must be text, parts or null")
        if message["role"] == "assistant":
            if not (content or message.get("tool_calls")):
                raise _fail(path, number, f"message {i} (assistant) has neither content nor calls")
            text = _turn_text({**message, "content": content if isinstance(content, str) else ""})
            calls = len(message.get("tool_calls") or ())
            turns.append(ReplayTurn(message, text, (), calls))
        elif turns:
            last = turns[-1]
            turns[-1] = ReplayTurn(
                last.assistant, last.text, (*last.followups, message), last.tool_calls
            )
        else:
            head.append(message)
    if not head or not turns:
        raise _fail(path, number, "a conversation needs an opening message and an assistant turn")
    return ReplayScript(f"trace-{number}", "trace", number, tuple(head), tuple(turns),
                        tuple(tools) if tools else None)  # fmt: skip


def load_traces(path: str | Path) -> list[ReplayScript]:
    """Read a JSONL traces file: one conversation per non-blank line.

    Raises:
        WorkloadError: The file cannot be read or a line is not a conversation; the message
            names the file and the line number.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"cannot read traces file {path}: {exc.strerror}") from None
    scripts = [_parse_line(path, n, raw) for n, raw in enumerate(lines, start=1) if raw.strip()]
    if not scripts:
        raise WorkloadError(f"traces file {path} holds no conversation")
    return scripts
