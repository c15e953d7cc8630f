"""What the fake vLLM server (`tuner.testing.fake_vllm`) answers a chat request: the prompt's
text, the reply's words as a lossy or near-tie speculative config would change them, their
log-probabilities and their stable token ids.

The log-probabilities are the same for every prompt: the reply's own word first, then a
runner-up `CLEAR_MARGIN` nats behind (`NEAR_TIE_MARGIN` at `NEAR_TIE_POSITION`), so the
correctness probe's tests know which flip it must flag. Only the standard library is imported.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = [
    "CLEAR_MARGIN",
    "CLEAR_POSITION",
    "FIXED_REPLY",
    "NEAR_TIE_MARGIN",
    "NEAR_TIE_POSITION",
    "logprobs",
    "prompt_text",
    "tie_modes",
    "word_id",
]

FIXED_REPLY = "This is a fake vLLM reply."

# The reply's log-probabilities (the same for every prompt): its word leads the runner-up by
# CLEAR_MARGIN nats, except at NEAR_TIE_POSITION ("vLLM"), a near-tie. Both positions are past
# the probe's "early" tokens, so only the margin tells the two modes apart.
NEAR_TIE_POSITION = 4
NEAR_TIE_MARGIN = 0.05
CLEAR_POSITION = 5
CLEAR_MARGIN = 6.0
_TOP_LOGPROB = -0.05


def prompt_text(body: dict[str, Any]) -> str:
    """A chat request's messages (and tool calls) as one text: what tokens and the cache count."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"]))
    return "\n".join(parts)


def tie_modes(speculative: bool, words: list[str]) -> list[str]:
    """FAKE_VLLM_FLIP_NEAR_TIES / FAKE_VLLM_CHANGE_CLEAR_TOKEN on a speculative server."""
    if not speculative:
        return words
    if os.environ.get("FAKE_VLLM_FLIP_NEAR_TIES") == "1" and len(words) > NEAR_TIE_POSITION:
        k = NEAR_TIE_POSITION
        words = [*words[:k], f"alt{k}"] + [f"flipped{j}" for j in range(len(words) - k - 1)]
    if os.environ.get("FAKE_VLLM_CHANGE_CLEAR_TOKEN") == "1" and len(words) > CLEAR_POSITION:
        words = [*words[:CLEAR_POSITION], f"alt{CLEAR_POSITION}", *words[CLEAR_POSITION + 1 :]]
    return words


def logprobs(words: list[str], body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI chat `logprobs` for `words`: each word top, then its runner-up, then another."""
    k = max(1, int(body.get("top_logprobs") or 1))
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    reply = FIXED_REPLY.split()

    def entry(word: str, logprob: float) -> dict[str, Any]:
        token = f"token_id:{word_id(word)}" if as_ids else word
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    content = []
    for i, word in enumerate(words):
        margin = NEAR_TIE_MARGIN if i == NEAR_TIE_POSITION else CLEAR_MARGIN
        # The reply's own word is the runner-up wherever this answer left it.
        runner = reply[i] if i < len(reply) and word != reply[i] else f"alt{i}"
        top = [
            entry(word, _TOP_LOGPROB),
            entry(runner, _TOP_LOGPROB - margin),
            entry(f"other{i}", _TOP_LOGPROB - margin - 1.0),
        ][:k]
        content.append({**entry(word, _TOP_LOGPROB), "top_logprobs": top})
    return {"content": content}


def word_id(word: str) -> int:
    # Stable across processes (str hash is salted per process).
    return sum((i + 1) * ord(c) for i, c in enumerate(word)) % 49152
