"""What every environment of the suite provides: tools, deterministic execution, a generator.

An environment is a small JSON state plus tools (OpenAI function schemas) that read or change
it. Execution is a pure function of (state, call); errors are `ToolError`s that the agent sees as
an error tool result. A `Scenario` is what a template generates for one seed: initial state,
instruction, the oracle's tool calls, its final answer and the facts that answer must contain.
The tool vocabulary (`ToolSpec`, `Param`, `ToolError`, money text) lives in
`tuner.workload.envs.tools` and is re-exported here.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuner.workload.envs.tools import Param, ToolError, ToolSpec, format_money, parse_money

__all__ = [
    "Call",
    "Environment",
    "Param",
    "Scenario",
    "ToolError",
    "ToolSpec",
    "format_money",
    "lookup",
    "parse_money",
]


def lookup(state: dict[str, Any], table: str, key: str, missing: str) -> dict[str, Any]:
    """The record `key` of `state[table]`; ToolError "<missing> <key>" when there is none."""
    try:
        record: dict[str, Any] = state[table][key]
    except KeyError:
        raise ToolError(f"{missing} {key}") from None
    return record


@dataclass(frozen=True)
class Call:
    """One tool call of an oracle script."""

    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    """What a template generates for one seed (before sizes and turn texts are added)."""

    initial_state: dict[str, Any]
    instruction: str
    calls: tuple[Call, ...]
    answer: str
    required_facts: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())  # what the oracle decided, for plans


class Environment(ABC):
    """A deterministic environment: state in, tool call, state and JSON result out.

    Subclasses give `name`, `pad_key` (the list that pads outputs to their drawn size),
    `tools`, `rules` (the policy the oracle follows, part of the shared prefix) and implement
    `execute`, `filler`, `canonical` and `generate`.
    """

    name: ClassVar[str]
    pad_key: ClassVar[str]
    tools: ClassVar[tuple[ToolSpec, ...]]
    rules: ClassVar[tuple[str, ...]]

    def tool(self, name: str) -> ToolSpec:
        """The spec of tool `name`; ToolError when this environment has none."""
        for spec in self.tools:
            if spec.name == name:
                return spec
        raise ToolError(f"unknown tool {name!r}")

    def call(self, state: dict[str, Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validate and execute one call; mutates `state`; raises ToolError."""
        self.tool(tool).validate(arguments)
        return self.execute(state, tool, arguments)

    @abstractmethod
    def execute(self, state: dict[str, Any], tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run a validated call: change `state` in place and return the result payload."""

    @abstractmethod
    def filler(self, state: dict[str, Any], rng: random.Random, index: int) -> dict[str, Any]:
        """One padding record (history, log line) that copies ids and amounts from `state`."""

    @abstractmethod
    def canonical(self, state: dict[str, Any]) -> Any:
        """The part of `state` the checker compares (generated ids and free text left out)."""

    @abstractmethod
    def generate(self, rng: random.Random, calls: int) -> Scenario:
        """A scenario whose oracle script has exactly `calls` tool calls (calls >= 2)."""
