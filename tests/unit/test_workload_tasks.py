"""The task suite: oracles pass their checkers, wrong scripts fail, generation is deterministic."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from tuner.workload import (
    SuiteShape,
    Task,
    TaskWorld,
    WorkloadSettings,
    build_task_set,
    check_task,
    generate_task,
    task_set_hash,
)
from tuner.workload.envs import ENVIRONMENTS, Call, ToolError, environment, parse_money
from tuner.workload.prompt import system_prompt
from tuner.workload.replay import script_for_task
from tuner.workload.tokens import estimate_tokens

TEMPLATES = [env.name for env in ENVIRONMENTS]
SHAPES = {"default": SuiteShape.default(), "cpu": SuiteShape.cpu_small()}
SEEDS = range(60)


def _play(task: Task, calls: tuple[Call, ...]) -> dict[str, Any]:
    """Run `calls` on a fresh copy of the task's state; refused calls are skipped like errors."""
    world = TaskWorld(task)
    for call in calls:
        world.try_call(call.tool, call.arguments)
    return world.state


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("template", TEMPLATES)
def test_every_oracle_passes_its_checker(template: str, shape: str) -> None:
    for seed in SEEDS:
        task = generate_task(template, seed, SHAPES[shape])
        world = TaskWorld(task)
        for call in task.calls:
            world.call(call.tool, call.arguments)  # the oracle never makes a refused call
        verdict = check_task(task, world.state, task.answer)
        assert verdict.ok, (task.task_id, verdict.reason)
        assert task.required_facts, task.task_id
        steps = len(task.steps)
        assert SHAPES[shape].steps_min <= steps <= SHAPES[shape].steps_max
        assert task.steps[-1].call is None  # the last model call is the final answer


def _first(task: Task, tools: tuple[str, ...]) -> int:
    return next(i for i, c in enumerate(task.calls) if c.tool in tools)


_CHANGING = ("post_transfer", "adjust_stock", "move_item", "move_file", "delete_file",
             "cancel_order", "refund_order")  # fmt: skip


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_missing_step_fails(template: str) -> None:
    for seed in SEEDS:
        task = generate_task(template, seed, SHAPES["cpu"])
        drop = _first(task, _CHANGING)
        calls = task.calls[:drop] + task.calls[drop + 1 :]
        verdict = check_task(task, _play(task, calls), task.answer)
        assert not verdict.ok
        assert verdict.reason == "final state differs from the oracle's"


def _wrong_amount(call: Call) -> Call:
    args = dict(call.arguments)
    if "amount" in args:
        args["amount"] = f"{parse_money(args['amount']) / 100 - 1.00:.2f}"
    elif "delta" in args:
        args["delta"] += 1
    else:
        return call
    return Call(call.tool, args)


@pytest.mark.parametrize("template", ["ledger", "inventory", "orders"])
def test_a_wrong_amount_fails(template: str) -> None:
    tested = 0
    for seed in SEEDS:
        task = generate_task(template, seed, SHAPES["default"])
        index = next(
            (i for i, c in enumerate(task.calls) if {"amount", "delta"} & set(c.arguments)), None
        )
        if index is None:
            continue  # e.g. an orders task with only a cancellation
        calls = list(task.calls)
        calls[index] = _wrong_amount(calls[index])
        verdict = check_task(task, _play(task, tuple(calls)), task.answer)
        assert not verdict.ok, task.task_id
        tested += 1
    assert tested > len(SEEDS) // 2


def test_a_wrong_destination_fails_the_file_tree() -> None:
    for seed in SEEDS:
        task = generate_task("filetree", seed, SHAPES["default"])
        index = _first(task, ("move_file",))
        calls = list(task.calls)
        args = dict(calls[index].arguments)
        args["destination"] = args["destination"].replace("/archive/", "/archives/")
        calls[index] = Call("move_file", args)
        assert not check_task(task, _play(task, tuple(calls)), task.answer).ok


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_wrong_final_answer_fails(template: str) -> None:
    for seed in SEEDS:
        task = generate_task(template, seed, SHAPES["default"])
        state = _play(task, task.calls)
        fact = task.required_facts[0]
        wrong = task.answer.replace(fact, "0.00" if re.search(r"\d", fact) else "XYZ-0")
        verdict = check_task(task, state, wrong)
        assert not verdict.ok
        assert verdict.reason is not None and "answer lacks" in verdict.reason
        assert not check_task(task, state, "All done.").ok


def test_the_answer_check_ignores_thousands_separators_and_case() -> None:
    task = generate_task("ledger", 3, SHAPES["default"])
    state = _play(task, task.calls)
    relaxed = task.answer.replace(",", "").lower()
    assert check_task(task, state, relaxed).ok


def test_generation_is_deterministic_and_seed_dependent() -> None:
    a = generate_task("orders", 42, SHAPES["default"])
    b = generate_task("orders", 42, SHAPES["default"])
    c = generate_task("orders", 43, SHAPES["default"])
    assert a == b
    assert a.initial_state != c.initial_state


def test_refused_calls_come_back_as_error_results_and_change_nothing() -> None:
    task = generate_task("ledger", 7, SHAPES["default"])
    world = TaskWorld(task)
    before = copy.deepcopy(world.state)
    out = json.loads(world.try_call("post_transfer", {"from_account": "ACC-0000"}))
    assert "missing argument" in out["error"]
    out = json.loads(world.try_call("get_account", {"account_id": "ACC-0000"}))
    assert out == {"error": "no account ACC-0000"}
    assert world.state == before
    with pytest.raises(ToolError, match="unknown tool"):
        world.call("get_item", {"sku": "SKU-1"})


def test_tool_outputs_copy_ids_from_the_state() -> None:
    task = generate_task("ledger", 11, SHAPES["default"])
    accounts = set(task.initial_state["accounts"])
    padded = [
        json.loads(s.output) for s in task.steps if s.output and "recent_transactions" in s.output
    ]
    assert padded, "some outputs are padded to their drawn size"
    for payload in padded:
        for record in payload["recent_transactions"]:
            assert record["account"] in accounts
            assert record["counterparty"] in accounts


def test_the_shared_prefix_is_byte_identical_across_tasks_and_sizes_to_the_shape() -> None:
    settings = WorkloadSettings(tasks=8, tool_protocol="text", shape=SHAPES["cpu"])
    heads = {script_for_task(t, settings).head[0]["content"] for t in build_task_set(settings)}
    assert len(heads) == 1
    big = system_prompt(SHAPES["default"], "text")
    assert len(big) > 3 * len(system_prompt(SHAPES["cpu"], "text"))
    for env in ENVIRONMENTS:  # every rule the oracle follows is in the policy
        assert all(rule in big for rule in env.rules)


def test_task_set_order_hash_and_warmup() -> None:
    settings = WorkloadSettings(tasks=8, warmup_tasks=4, shape=SHAPES["cpu"])
    tasks = build_task_set(settings)
    assert [t.template for t in tasks] == TEMPLATES * 2
    warm = build_task_set(settings, warmup=True)
    assert len(warm) == 4
    assert not {t.task_id for t in warm} & {t.task_id for t in tasks}
    ids = [t.task_id for t in tasks]
    digest = task_set_hash(ids, settings.shape)
    assert digest == task_set_hash(list(ids), SuiteShape.cpu_small())
    assert digest != task_set_hash(ids[::-1], settings.shape)
    assert digest != task_set_hash(ids, SHAPES["default"])
    assert [t.task_id for t in build_task_set(settings.model_copy(update={"seed": 1}))] != ids


def test_context_stays_under_the_shape_bound_in_estimated_tokens() -> None:
    tight = SuiteShape(max_context_tokens=9000, shared_prefix_tokens=3000)
    for template in TEMPLATES:
        for seed in range(20):
            task = generate_task(template, seed, tight)
            text = task.instruction + "".join(s.text + (s.output or "") for s in task.steps)
            total = estimate_tokens(system_prompt(tight, "text") + text)
            assert total < tight.max_context_tokens * 1.05, (task.task_id, total)


def test_environment_lookup() -> None:
    assert environment("orders").name == "orders"
    with pytest.raises(KeyError):
        environment("nope")


def test_a_fact_counts_only_as_a_whole_token() -> None:
    tasks = (generate_task("ledger", seed, SHAPES["cpu"]) for seed in SEEDS)
    task = next(t for t in tasks if any(f.startswith("REQ-") for f in t.required_facts))
    state = _play(task, task.calls)
    skipped = next(f for f in task.required_facts if f.startswith("REQ-"))
    assert check_task(task, state, task.answer).ok
    assert not check_task(task, state, task.answer.replace(skipped, skipped + "1")).ok
    assert not check_task(task, state, task.answer.replace(skipped, "X" + skipped)).ok
