"""The shared prefix and how turns are written and read in the two tool protocols.

The system prompt (policy of every environment, an operating handbook padded to the shape's
prefix size and, in the text protocol, the tool list) is a pure function of (shape, protocol):
byte-identical across tasks and agents, which is what lets the prefix cache serve it.

- "tools": OpenAI `tools` in the request; assistant `tool_calls`; results as `tool` messages.
- "text": the assistant writes one JSON action in a ```json fenced block; results come back as
  user messages. A reply with no action is the final answer.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tuner.workload.envs import ENVIRONMENTS, all_tools
from tuner.workload.shape import SuiteShape
from tuner.workload.tokens import estimate_tokens

__all__ = [
    "ActionError",
    "ParsedAction",
    "action_json",
    "assistant_message",
    "final_message",
    "openai_tools",
    "parse_text_action",
    "system_prompt",
    "tool_result_message",
]

_INTRO = (
    "You are the back-office operations agent of Northwind Supply. Each ticket asks you to "
    "change records in one of our systems (ledger, inventory, file server, orders) and report "
    "the result. Work step by step with the tools, one call at a time, and follow the policy "
    "below exactly: the records are audited against it."
)
_GENERAL = (
    "Use only ids, paths and amounts that appear in the ticket or in tool results.",
    "Never guess a value a tool can tell you; look it up.",
    "If a tool returns an error, read it, fix the call or follow the policy, and go on.",
    "Finish with a short plain-text answer that states every figure the ticket asks for.",
)
_TEXT_PROTOCOL = (
    "To call a tool, write one short sentence, then exactly one JSON object in a fenced block:\n"
    '```json\n{"tool": "get_account", "arguments": {"account_id": "ACC-1042"}}\n```\n'
    "Call one tool per reply and wait for its result. When the work is done, reply with the "
    "final answer in plain text and no JSON block."
)
_TOOLS_PROTOCOL = (
    "Call one tool at a time and wait for its result. When the work is done, reply with the "
    "final answer in plain text without calling a tool."
)

# The handbook pads the policy to the shape's prefix size with plausible, fixed rules.
_SUBJECTS = ("ticket", "request", "record", "batch", "account", "shipment", "directory", "refund")
_CONDITIONS = (
    "arrives after the daily cut-off", "names an id that no tool knows", "repeats an earlier "
    "request", "mixes two customers", "lacks a reference", "was escalated by a supervisor",
    "touches a frozen or archived record", "comes from an unverified sender",
)  # fmt: skip
_ACTIONS = (
    "handle it in the order received", "state the id in the final answer", "do not merge it "
    "with other work", "follow the strictest rule that applies", "leave unrelated records "
    "untouched", "quote the exact amount from the tool result", "keep the original reference",
)  # fmt: skip
_RECORDS = ("audit trail", "daily report", "shift log", "ticket history", "review queue")


def _handbook(rng: random.Random, n: int) -> str:
    return (
        f"H{n}. When a {rng.choice(_SUBJECTS)} {rng.choice(_CONDITIONS)}, "
        f"{rng.choice(_ACTIONS)} and note it in the {rng.choice(_RECORDS)}."
    )


def openai_tools() -> list[dict[str, Any]]:
    """The OpenAI `tools` list: every tool of every environment, in a fixed order."""
    return [spec.openai_schema() for spec in all_tools()]


@lru_cache(maxsize=8)
def system_prompt(shape: SuiteShape, protocol: str) -> str:
    """The shared prefix for `shape` and `protocol` ("tools" or "text"), byte-identical."""
    parts = [_INTRO, "", "# Policy", "## General"]
    parts += [f"G{i + 1}. {rule}" for i, rule in enumerate(_GENERAL)]
    for env in ENVIRONMENTS:
        parts.append(f"## {env.name.capitalize()}")
        letter = env.name[0].upper()
        parts += [f"{letter}{i + 1}. {rule}" for i, rule in enumerate(env.rules)]
    tail: list[str] = []
    if protocol == "text":
        tail += ["", "# Tools", *(spec.signature() for spec in all_tools())]
        tail += ["", "# How to call a tool", _TEXT_PROTOCOL]
        extra = 0
    else:
        tail += ["", "# How to call a tool", _TOOLS_PROTOCOL]
        extra = estimate_tokens(json.dumps(openai_tools()))  # rendered by the chat template
    used = estimate_tokens("\n".join(parts + tail)) + extra
    rng = random.Random(20241129)
    handbook: list[str] = []
    while used < shape.shared_prefix_tokens:
        line = _handbook(rng, len(handbook) + 1)
        handbook.append(line)
        used += estimate_tokens(line) + 1
    if handbook:
        parts += ["## Operating handbook", *handbook]
    return "\n".join(parts + tail)


def action_json(tool: str, arguments: dict[str, Any]) -> str:
    """The JSON of one action as the text protocol writes it."""
    return json.dumps({"tool": tool, "arguments": arguments})


def assistant_message(
    protocol: str, index: int, text: str, tool: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """The assistant turn that calls `tool` (step `index` of its task)."""
    if protocol == "text":
        block = f"```json\n{action_json(tool, arguments)}\n```"
        return {"role": "assistant", "content": f"{text}\n{block}" if text else block}
    call = {
        "id": f"call_{index}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": text, "tool_calls": [call]}


def tool_result_message(protocol: str, call_id: str, tool: str, output: str) -> dict[str, Any]:
    """The message that hands a tool's output (or error) back to the model."""
    if protocol == "text":
        return {"role": "user", "content": f"Result of {tool}:\n```json\n{output}\n```"}
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def final_message(text: str) -> dict[str, Any]:
    """The assistant's final answer."""
    return {"role": "assistant", "content": text}


class ActionError(ValueError):
    """The model wrote an action that cannot be run; the message goes back to it."""


@dataclass(frozen=True)
class ParsedAction:
    """A tool call read from a model reply."""

    tool: str
    arguments: dict[str, Any]


_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL)
_BARE = re.compile(r"\{.*\"tool\".*\}", re.DOTALL)


def parse_text_action(content: str) -> ParsedAction | None:
    """The action in a text-protocol reply; None when the reply is a final answer.

    Raises:
        ActionError: A JSON block is there but is not a valid action.
    """
    match = _FENCE.search(content)
    if match is not None:
        raw = match.group(1).strip()
    else:
        bare = _BARE.search(content)
        if bare is None:
            return None
        raw = bare.group(0)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ActionError(f"the JSON block does not parse: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ActionError('the JSON block must be an object {"tool": ..., "arguments": {...}}')
    tool = data.get("tool", data.get("name"))
    arguments = data.get("arguments", data.get("parameters", {}))
    if not isinstance(tool, str) or not isinstance(arguments, dict):
        raise ActionError('the action needs "tool" (a name) and "arguments" (an object)')
    return ParsedAction(tool, arguments)
