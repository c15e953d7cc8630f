"""The text protocol: actions read from model replies; the shared prefix per protocol."""

from __future__ import annotations

import pytest

from tuner.workload.prompt import (
    ActionError,
    ParsedAction,
    assistant_message,
    openai_tools,
    parse_text_action,
    system_prompt,
)
from tuner.workload.shape import SuiteShape
from tuner.workload.tokens import TokenCounter, estimate_tokens


def test_a_fenced_action_is_read() -> None:
    reply = 'Checking first.\n```json\n{"tool": "get_item", "arguments": {"sku": "SKU-1"}}\n```'
    assert parse_text_action(reply) == ParsedAction("get_item", {"sku": "SKU-1"})


def test_a_bare_action_and_alternative_keys_are_read() -> None:
    assert parse_text_action('{"tool": "list_dir", "arguments": {"path": "/srv"}}') == (
        ParsedAction("list_dir", {"path": "/srv"})
    )
    fenced = '```\n{"name": "get_order", "parameters": {"order_id": "ORD-1"}}\n```'
    assert parse_text_action(fenced) == ParsedAction("get_order", {"order_id": "ORD-1"})


def test_a_reply_without_an_action_is_the_final_answer() -> None:
    assert parse_text_action("Final balance of ACC-1042: 1,125.00.") is None


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ('```json\n{"tool": "get_item", "arguments": {"sku": }\n```', "does not parse"),
        ("```json\n[1, 2]\n```", "must be an object"),
        ('```json\n{"tool": 3, "arguments": {}}\n```', 'needs "tool"'),
        ('```json\n{"tool": "x", "arguments": "sku"}\n```', 'needs "tool"'),
    ],
)
def test_a_broken_action_is_an_error_for_the_model(reply: str, message: str) -> None:
    with pytest.raises(ActionError, match=message):
        parse_text_action(reply)


def test_the_oracle_turn_round_trips_through_the_parser() -> None:
    message = assistant_message("text", 0, "Next: get_item.", "get_item", {"sku": "SKU-7"})
    assert parse_text_action(message["content"]) == ParsedAction("get_item", {"sku": "SKU-7"})
    tools = assistant_message("tools", 3, "", "get_item", {"sku": "SKU-7"})
    assert tools["tool_calls"][0]["id"] == "call_3"
    assert tools["tool_calls"][0]["function"]["arguments"] == '{"sku": "SKU-7"}'


def test_prefix_sizes_follow_the_shape_and_protocol() -> None:
    big, small = SuiteShape.default(), SuiteShape.cpu_small()
    text = system_prompt(big, "text")
    tools = system_prompt(big, "tools")
    assert "# Tools" in text and "# Tools" not in tools
    # In the tools protocol the schemas travel in `tools`; prompt plus schemas hit the target.
    schemas = estimate_tokens(str(openai_tools()))
    assert abs(estimate_tokens(tools) + schemas - big.shared_prefix_tokens) < 400
    assert abs(estimate_tokens(text) - big.shared_prefix_tokens) < 50
    assert estimate_tokens(system_prompt(small, "text")) < 1200
    assert system_prompt(big, "text") is system_prompt(big, "text")  # cached, one object


def test_the_estimate_counts_digits_one_by_one() -> None:
    assert estimate_tokens("12345") == 5
    assert estimate_tokens("account") == 1
    assert estimate_tokens('{"a": 1}') == 5  # {"  a  ":  1  }
    counter = TokenCounter.estimate()
    assert counter.estimated and counter.count("12345") == 5
