"""The recorded agent traces the suffix A/B replayed (issue 47; script removed after 500fc0c).

`benchmarks/data/traces/swe-agent-demos.jsonl` (SWE-agent trajectories, see its README) must
load with the loader the workload uses, hold enough conversations of at least two assistant
turns each, and fit the CPU preset's context: every conversation within 6,000 tokens of
SmolLM2's tokenizer. The token bound is measured here independently of the converter: the
conversation rendered by hand in ChatML (SmolLM2's chat template) and encoded with the
`tokenizers` library from the cached tokenizer.json (skipped when no cache holds it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tuner.workload import load_traces

TRACES = Path(__file__).resolve().parents[2] / "benchmarks/data/traces/swe-agent-demos.jsonl"
MAX_TOKENS = 6000
SCRIPTS = load_traces(TRACES)


def _tokenizer_json() -> Path | None:
    caches = [Path.home() / ".cache" / "tuner", Path.home() / ".cache" / "tuner-test"]
    if os.environ.get("TUNER_TEST_CACHE"):
        caches.insert(0, Path(os.environ["TUNER_TEST_CACHE"]))
    for cache in caches:
        path = cache / "models" / "smollm2-135m" / "tokenizer.json"
        if path.is_file():
            return path
    return None


def _messages(index: int) -> list[dict[str, Any]]:
    script = SCRIPTS[index]
    return [*script.head, *(m for t in script.turns for m in (t.assistant, *t.followups))]


def test_file_is_small_and_every_line_is_a_conversation() -> None:
    assert TRACES.stat().st_size < 1_000_000
    lines = [line for line in TRACES.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(SCRIPTS) == len(lines) >= 6


@pytest.mark.parametrize("index", range(len(SCRIPTS)))
def test_conversation_shape(index: int) -> None:
    script = SCRIPTS[index]
    assert len(script.turns) >= 2
    assert script.tools is None  # the text protocol: no tool schemas, no tool calls
    for message in _messages(index):
        assert message["role"] in {"system", "user", "assistant"}
        assert isinstance(message["content"], str) and message["content"]
        assert "tool_calls" not in message
    assert script.head[0]["role"] == "system"
    assert not script.turns[-1].followups  # ends on an assistant turn


def test_every_conversation_fits_the_token_budget() -> None:
    path = _tokenizer_json()
    if path is None:
        pytest.skip("SmolLM2's tokenizer.json is not in a local cache")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    for index in range(len(SCRIPTS)):
        rendered = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in _messages(index)
        )
        tokens = len(tok.encode(rendered, add_special_tokens=False).ids)
        assert tokens <= MAX_TOKENS, f"conversation {index + 1}: {tokens} tokens"
