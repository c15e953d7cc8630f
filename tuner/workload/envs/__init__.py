"""The suite's environments, in the fixed order tasks cycle through them."""

from __future__ import annotations

from tuner.workload.envs.base import Call, Environment, Scenario
from tuner.workload.envs.filetree import FileTree
from tuner.workload.envs.inventory import Inventory
from tuner.workload.envs.ledger import Ledger
from tuner.workload.envs.orders import Orders
from tuner.workload.envs.tools import Param, ToolError, ToolSpec, format_money, parse_money

__all__ = [
    "ENVIRONMENTS",
    "Call",
    "Environment",
    "FileTree",
    "Inventory",
    "Ledger",
    "Orders",
    "Param",
    "Scenario",
    "ToolError",
    "ToolSpec",
    "all_tools",
    "environment",
    "format_money",
    "parse_money",
]

ENVIRONMENTS: tuple[Environment, ...] = (Ledger(), Inventory(), FileTree(), Orders())


def environment(name: str) -> Environment:
    """The environment called `name`."""
    for env in ENVIRONMENTS:
        if env.name == name:
            return env
    raise KeyError(name)


def all_tools() -> tuple[ToolSpec, ...]:
    """Every tool of every environment, in a fixed order (the shared prefix lists them all)."""
    return tuple(spec for env in ENVIRONMENTS for spec in env.tools)
