"""What a tool is made of: its spec and parameters, the error a refused call raises, money text.

A `ToolSpec` is one tool as the agent sees it (an OpenAI function schema or a one-line signature)
and checks a call's arguments against it; `ToolSpec.of` with `string_param` / `integer_param` is
how the environments write their tool tables. Amounts cross the tool boundary as text such as
1,250.40, so reading and writing them lives here with the tools rather than in each environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Param",
    "ToolError",
    "ToolSpec",
    "format_money",
    "integer_param",
    "parse_money",
    "string_param",
]


class ToolError(Exception):
    """A tool call the environment refuses; its message goes back to the agent."""


@dataclass(frozen=True)
class Param:
    """One parameter of a tool."""

    name: str
    type: str  # JSON schema type: "string" | "integer" | "number"
    description: str


def string_param(name: str, description: str) -> Param:
    """A parameter whose value is a JSON string."""
    return Param(name, "string", description)


def integer_param(name: str, description: str) -> Param:
    """A parameter whose value is a JSON integer."""
    return Param(name, "integer", description)


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what it does and its parameters (all required)."""

    name: str
    description: str
    params: tuple[Param, ...]

    @classmethod
    def of(cls, name: str, description: str, *params: Param) -> ToolSpec:
        """The spec with `params` listed one by one, in the order the schema lists them."""
        return cls(name, description, params)

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
