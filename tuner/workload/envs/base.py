"""What every environment of the suite provides: tools, deterministic execution, a generator.

An environment is a small JSON state plus tools (OpenAI function schemas) that read or change
it. Execution is a pure function of (state, call); errors are `ToolError`s that the agent sees as
an error tool result. A `Scenario` is what a template generates for one seed: initial state,
instruction, the oracle's tool calls, its final answer and the facts that answer must contain.
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "Call",
    "Environment",
    "Param",
    "Scenario",
    "ToolError",
    "ToolSpec",
    "format_money",
    "parse_money",
]


class ToolError(Exception):
    """A tool call the environment refuses; its message goes back to the agent."""


@dataclass(frozen=True)
class Param:
    """One parameter of a tool."""

    name: str
    type: str  # JSON schema type: "string" | "integer" | "number"
    description: str


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what it does and its parameters (all required)."""

    name: str
    description: str
    params: tuple[Param, ...]

    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI `tools` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {
                        p.name: {"type": p.type, "description": p.description} for p in self.params
                    },
                    "required": [p.name for p in self.params],
                },
            },
        }

    def signature(self) -> str:
        """A one-line description for the text protocol's system prompt."""
        args = ", ".join(f"{p.name}: {p.type}" for p in self.params)
        return f"- {self.name}({args}): {self.description}"

    def validate(self, arguments: dict[str, Any]) -> None:
        """Raise ToolError unless `arguments` has exactly the parameters, of the right kinds."""
        names = {p.name for p in self.params}
        missing = [p.name for p in self.params if p.name not in arguments]
        extra = sorted(set(arguments) - names)
        if missing:
            raise ToolError(f"{self.name}: missing argument(s) {', '.join(missing)}")
        if extra:
            raise ToolError(f"{self.name}: unknown argument(s) {', '.join(extra)}")
        for p in self.params:
            value = arguments[p.name]
            ok = {
                "string": isinstance(value, str),
                "integer": isinstance(value, int) and not isinstance(value, bool),
                "number": isinstance(value, int | float | str) and not isinstance(value, bool),
            }[p.type]
            if not ok:
                raise ToolError(f"{self.name}: argument {p.name} must be a {p.type}")


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


def format_money(cents: int) -> str:
    """1,250.40 for 125040 cents (negative amounts with a leading minus)."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{frac:02d}"


_MONEY = re.compile(r"^-?\d+(\.\d{1,2})?$")


def parse_money(value: object) -> int:
    """Cents from "1,250.40", "1250.4", 1250.4 or 1250; ToolError for anything else."""
    if isinstance(value, bool):
        raise ToolError("amount must be a number like 125.40")
    if isinstance(value, int):
        return value * 100
    if isinstance(value, float):
        return round(value * 100)
    if isinstance(value, str):
        text = value.strip().replace(",", "").lstrip("$")
        if _MONEY.match(text):
            whole, _, frac = text.partition(".")
            sign = -1 if whole.startswith("-") else 1
            return sign * (abs(int(whole)) * 100 + int((frac + "00")[:2]))
    raise ToolError(f"amount must be a number like 125.40, not {value!r}")
