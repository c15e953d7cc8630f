"""Tasks: (template, seed) -> initial state, instruction, oracle script, checker; the task set.

`generate_task` asks an environment for a scenario with the drawn number of tool calls, runs the
oracle script on a copy of the state to get every tool output (padded to its drawn lognormal
size, clipped so the final context stays under the shape's bound), and writes the assistant turn
texts at their drawn sizes. `TaskWorld` is one agent's copy of the state in live mode;
`check_task` grades a final state and answer. `build_task_set` gives the fixed, ordered set.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.workload.envs import ENVIRONMENTS, Call, ToolError, environment
from tuner.workload.prompt import action_json, system_prompt
from tuner.workload.settings import WorkloadSettings
from tuner.workload.shape import SuiteShape
from tuner.workload.tokens import estimate_tokens

__all__ = [
    "CheckResult",
    "OracleStep",
    "Task",
    "TaskWorld",
    "build_task_set",
    "check_task",
    "derive_seed",
    "generate_task",
    "task_set_hash",
]

_MESSAGE_OVERHEAD = 5  # ChatML-like wrapper per message, in estimated tokens


@dataclass(frozen=True)
class OracleStep:
    """One scripted model call: the turn's prose, its tool call (None: final) and the output."""

    text: str
    call: Call | None
    output: str | None


@dataclass(frozen=True)
class Task:
    """One generated task, everything fixed by (template, seed, shape)."""

    task_id: str
    template: str
    seed: int
    instruction: str
    initial_state: Mapping[str, Any]
    steps: tuple[OracleStep, ...]
    required_facts: tuple[str, ...]
    output_sizes: Mapping[str, int]
    fallback_output_tokens: int

    @property
    def answer(self) -> str:
        """The oracle's final answer (the last step's text)."""
        return self.steps[-1].text

    @property
    def calls(self) -> tuple[Call, ...]:
        """The oracle's tool calls, in order."""
        return tuple(s.call for s in self.steps if s.call is not None)


def _call_key(tool: str, arguments: Mapping[str, Any]) -> str:
    return json.dumps([tool, arguments], sort_keys=True)


def _pad(payload: dict[str, Any], records: Any, pad_key: str, target: int) -> str:
    """`payload` as JSON with filler records under `pad_key` until it reaches `target` tokens."""
    text = json.dumps(payload)
    used = estimate_tokens(text)
    if used >= target:
        return text
    fill: list[dict[str, Any]] = []
    used += 4  # the key and brackets
    for record in records:
        cost = estimate_tokens(json.dumps(record)) + 1
        if used + cost > target:
            break
        fill.append(record)
        used += cost
    if not fill:
        return text
    return json.dumps({**payload, pad_key: fill})


class TaskWorld:
    """One run's copy of a task's environment state; tool calls return JSON text."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.env = environment(task.template)
        self.state: dict[str, Any] = copy.deepcopy(dict(task.initial_state))

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run a call and return its (padded) JSON output; ToolError for a refused call."""
        payload = self.env.call(self.state, tool, arguments)
        key = _call_key(tool, arguments)
        target = self.task.output_sizes.get(key, self.task.fallback_output_tokens)
        rng = random.Random(f"{self.task.seed}:{key}")
        records = (self.env.filler(self.state, rng, i) for i in range(10_000))
        return _pad(payload, records, self.env.pad_key, target)

    def try_call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Like `call`, but a refused call becomes an error JSON for the agent to read."""
        try:
            return self.call(tool, arguments)
        except ToolError as exc:
            return json.dumps({"error": str(exc)})


@dataclass(frozen=True)
class CheckResult:
    """The checker's verdict: ok, or the reason the task failed."""

    ok: bool
    reason: str | None = None


def _normalise(text: str) -> str:
    return " ".join(text.lower().replace(",", "").replace("$", "").split())


def _states(fact: str, said: str) -> bool:
    """True when `fact` appears in `said` as a whole token (REQ-2 is not in REQ-21)."""
    pattern = r"(?<![\w-])" + re.escape(_normalise(fact)) + r"(?![\w-]|\.\d)"
    return re.search(pattern, said) is not None


def check_task(task: Task, final_state: Mapping[str, Any], answer: str) -> CheckResult:
    """Grade a task: the final state must equal the oracle's, the answer hold every fact."""
    env = environment(task.template)
    oracle = copy.deepcopy(dict(task.initial_state))
    for call in task.calls:
        env.call(oracle, call.tool, call.arguments)
    if env.canonical(dict(final_state)) != env.canonical(oracle):
        return CheckResult(False, "final state differs from the oracle's")
    said = _normalise(answer)
    missing = [f for f in task.required_facts if not _states(f, said)]
    if missing:
        return CheckResult(False, f"answer lacks {', '.join(missing)}")
    return CheckResult(True)


def _sentences(call: Call, notes: tuple[str, ...], rules: tuple[str, ...]) -> list[str]:
    """Prose the agent might write before a call: why, with the ids copied from the call."""
    first = next(iter(call.arguments.values()), "")
    out = [f"Next: {call.tool} for {first}."]
    out += [f"Done so far: {note}." for note in reversed(notes)]
    out += [f"Policy: {rule}" for rule in rules]
    return out


def _fit(sentences: list[str], fixed: str, target: int) -> str:
    """Sentences, in order, that fit beside `fixed` within `target` tokens (fixed kept whole).

    A sentence too long for the room left is skipped, so shorter ones after it still fill it.
    """
    chosen: list[str] = []
    used = estimate_tokens(fixed)
    for sentence in sentences:
        cost = estimate_tokens(sentence) + 1
        if used + cost <= target:
            chosen.append(sentence)
            used += cost
    return " ".join(chosen)


def _plan(notes: tuple[str, ...], rules: tuple[str, ...], target: int) -> str:
    lines = ["Plan:"] + [f"{i + 1}. {note}" for i, note in enumerate(notes)]
    lines += [f"Rule: {rule}" for rule in rules] * 6
    return _fit(lines, "", target).replace(" Rule:", "\nRule:")


def generate_task(template: str, seed: int, shape: SuiteShape, protocol: str = "text") -> Task:
    """Generate the task of `template` for `seed` at `shape` (deterministic).

    Args:
        template: An environment name (ledger, inventory, filetree, orders).
        seed: The task's seed.
        shape: Sizes to draw from.
        protocol: The tool protocol, for the prefix size used in the context bound.

    Returns:
        The task with its oracle script, padded outputs and turn texts.
    """
    env = environment(template)
    rng = random.Random(seed)
    calls = shape.draw_steps(rng) - 1
    scenario = env.generate(random.Random(seed * 7 + 1), calls)
    state = copy.deepcopy(scenario.initial_state)
    planned = rng.random() < shape.plan_probability
    context = estimate_tokens(system_prompt(shape, protocol)) + estimate_tokens(
        scenario.instruction
    )
    context += 2 * _MESSAGE_OVERHEAD
    # Reserve room for the turns still to come so clipping spreads over the task's outputs.
    per_step_floor = shape.call_turn_max_tokens + 2 * _MESSAGE_OVERHEAD + 40
    final_reserve = shape.plan_turn_max_tokens if planned else shape.call_turn_max_tokens
    bound = int(shape.max_context_tokens * 0.95)  # the estimate is within ~7% of real tokens
    steps: list[OracleStep] = []
    sizes: dict[str, int] = {}
    for index, call in enumerate(scenario.calls):
        fixed = action_json(call.tool, call.arguments)
        if index == 0 and planned:
            text = _plan(scenario.notes, env.rules, shape.draw_plan_turn(rng))
        else:
            target = shape.draw_call_turn(rng)
            text = _fit(_sentences(call, scenario.notes[:index], env.rules), fixed, target)
        payload = env.call(state, call.tool, call.arguments)
        left = len(scenario.calls) - index - 1
        room = bound - context - left * per_step_floor - final_reserve
        size = min(shape.draw_tool_output(rng), max(0, room - estimate_tokens(text + fixed)))
        key = _call_key(call.tool, call.arguments)
        record_rng = random.Random(f"{seed}:{key}")
        records = (env.filler(state, record_rng, i) for i in range(10_000))
        output = _pad(payload, records, env.pad_key, size)
        sizes.setdefault(key, size)
        steps.append(OracleStep(text, call, output))
        context += estimate_tokens(text + fixed) + estimate_tokens(output) + 2 * _MESSAGE_OVERHEAD
    if planned:
        recap = [f"Done: {note}." for note in scenario.notes] * 6
        text = scenario.answer + " " + _fit(recap, scenario.answer, shape.draw_plan_turn(rng))
    else:
        recap = [f"Done: {note}." for note in scenario.notes]
        target = shape.draw_call_turn(rng)
        text = (_fit(recap, scenario.answer, target) + " " + scenario.answer).strip()
    steps.append(OracleStep(text.strip(), None, None))
    return Task(
        task_id=f"{template}-{seed:010d}",
        template=template,
        seed=seed,
        instruction=scenario.instruction,
        initial_state=scenario.initial_state,
        steps=tuple(steps),
        required_facts=scenario.required_facts,
        output_sizes=sizes,
        fallback_output_tokens=shape.tool_output_median_tokens,
    )


def derive_seed(base: int, index: int) -> int:
    """The seed of task `index` of a set seeded `base` (stable across Python versions)."""
    digest = hashlib.sha256(f"tuner-task/{base}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def build_task_set(settings: WorkloadSettings, *, warmup: bool = False) -> list[Task]:
    """The fixed, ordered scored set (or the warm-up set) for `settings`.

    Templates cycle in a fixed order; seeds derive from `settings.seed` (warm-up tasks from
    `settings.warmup_seed`, so they never repeat a scored task).
    """
    base = settings.warmup_seed if warmup else settings.seed
    count = settings.warmup_tasks if warmup else settings.tasks
    return [
        generate_task(
            ENVIRONMENTS[i % len(ENVIRONMENTS)].name,
            derive_seed(base, i),
            settings.shape,
            settings.tool_protocol,
        )
        for i in range(count)
    ]


def task_set_hash(task_ids: list[str], shape: SuiteShape) -> str:
    """SHA-256 over the ordered task ids and the shape: equal hashes, equal workloads."""
    blob = json.dumps({"tasks": task_ids, "shape": shape.model_dump()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
