"""`--traces FILE.jsonl`: conversations read into replay scripts; bad lines named by number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.errors import WorkloadError
from tuner.workload import load_traces

CONVERSATION = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Find SKU-1."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_item", "arguments": '{"sku": "SKU-1"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"sku": "SKU-1", "on_hand": 4}'},
    {"role": "assistant", "content": "SKU-1 has 4 on hand."},
]


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_conversations_become_replay_scripts(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "get_item", "parameters": {}}}]
    path = _write(
        tmp_path,
        json.dumps(CONVERSATION),
        "",
        json.dumps({"messages": CONVERSATION[:3], "tools": tools}),
    )
    first, second = load_traces(path)
    assert first.task_id == "trace-1" and second.task_id == "trace-3"
    assert [m["role"] for m in first.head] == ["system", "user"]
    assert len(first.turns) == 2
    assert first.turns[0].tool_calls == 1
    assert first.turns[0].followups == (CONVERSATION[3],)
    assert '"get_item"' in first.turns[0].text  # the forced length counts the call
    assert first.turns[1].text == "SKU-1 has 4 on hand."
    assert first.tools is None
    assert second.tools == tuple(tools)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "not JSON"),
        ('"a string"', "expected a list of messages"),
        ("[]", "expected a list of messages"),
        ('[{"role": "wizard", "content": "x"}]', "message 0 needs a role"),
        ('[{"role": "user", "content": 3}]', "content must be text"),
        ('[{"role": "user", "content": "hi"}]', "needs an opening message and an assistant"),
        ('[{"role": "user", "content": "hi"}, {"role": "assistant"}]', "neither content"),
        ('{"messages": [], "tools": {}}', '"tools" must be a list'),
    ],
)
def test_a_bad_line_is_one_clear_error_naming_file_and_line(
    tmp_path: Path, line: str, why: str
) -> None:
    path = _write(tmp_path, json.dumps(CONVERSATION), line)
    with pytest.raises(WorkloadError) as info:
        load_traces(path)
    message = info.value.user_line()
    assert message.startswith(f"traces file {path} line 2: ")
    assert why in message
    assert "\n" not in message


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot read traces file"):
        load_traces(tmp_path / "absent.jsonl")
    with pytest.raises(WorkloadError, match="holds no conversation"):
        load_traces(_write(tmp_path, "", "  "))
