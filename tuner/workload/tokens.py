"""Token counting: the model's own tokenizer when one is given, else a stable estimate.

The task suite is generated with `estimate_tokens`, so the same seed gives byte-identical tasks
whatever tokenizer is later used to measure them; `TokenCounter` counts with a real tokenizer
(`transformers.AutoTokenizer`, local path or name in the local cache) for `tuner workload
describe` and for the forced turn lengths of replay mode.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from tuner.errors import WorkloadError

__all__ = ["TokenCounter", "estimate_tokens"]

# BPE vocabularies of the models we serve split digits one per token, keep most words whole and
# merge short punctuation runs such as `": "`; calibrated on the suite against SmolLM2's
# tokenizer (within 7% on prose, JSON tool outputs and assistant turns).
_PIECES = re.compile(r"[A-Za-z]+|\d|\n+|[^\sA-Za-z\d]+")


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate of the token count of `text` (deterministic).

    Args:
        text: Any text.

    Returns:
        About as many tokens as a modern BPE tokenizer would give.
    """
    count = 0
    for piece in _PIECES.findall(text):
        if piece[0].isalpha():
            count += math.ceil(len(piece) / 8)
        elif piece[0].isdigit() or piece[0] == "\n":
            count += 1
        else:
            count += math.ceil(len(piece) / 2)
    return count


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of text and of chat messages with one tokenizer (or the estimate).

    Attributes:
        name: The tokenizer's path or name, or "estimate".
        count: Tokens in a piece of text.
        message_overhead: Tokens the chat template adds around each message's content.
    """

    name: str
    count: Callable[[str], int]
    message_overhead: int

    @property
    def estimated(self) -> bool:
        """True when no real tokenizer is used."""
        return self.name == "estimate"

    @classmethod
    def estimate(cls) -> TokenCounter:
        """The tokenizer-free counter (ChatML-like wrapper of about 5 tokens per message)."""
        return cls("estimate", estimate_tokens, 5)

    @classmethod
    def load(cls, tokenizer: str | None) -> TokenCounter:
        """A counter for the tokenizer at `tokenizer` (a local path or cached name).

        Loaded once per process and path (a worker runs many trials with one tokenizer).

        Args:
            tokenizer: Path or name for `AutoTokenizer.from_pretrained`; None for the estimate.

        Raises:
            WorkloadError: The tokenizer cannot be loaded.
        """
        if tokenizer is None:
            return cls.estimate()
        # One loader at a time: a trial preloads the tokenizer in a thread while its server
        # starts, and a second thread importing transformers' lazy module meanwhile got
        # "cannot import name 'AutoTokenizer'" (a fast-starting server, a loaded machine).
        with _LOAD_LOCK:
            return _load(str(tokenizer))


_LOAD_LOCK = threading.Lock()


@lru_cache(maxsize=4)
def _load(tokenizer: str) -> TokenCounter:
    """Load a tokenizer's counter (cached; a failure is not, so a fixed path can be retried)."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
    except Exception as exc:  # transformers raises many types; the user needs one line
        raise WorkloadError(
            f"cannot load the tokenizer {tokenizer!r}: {exc}; give a local model path"
        ) from exc

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    return TokenCounter(tokenizer, count, _message_overhead(tok, count))


def _message_overhead(tok: object, count: Callable[[str], int]) -> int:
    """Tokens a chat template adds per message, measured on a two-message conversation."""
    apply = getattr(tok, "apply_chat_template", None)
    if apply is None or getattr(tok, "chat_template", None) is None:
        return 5
    messages = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "question"},
    ]
    try:
        ids = apply(messages, tokenize=True, add_generation_prompt=False)
    except Exception:  # a template that rejects this shape: fall back to the ChatML figure
        return 5
    if not isinstance(ids, list):  # newer transformers return a BatchEncoding
        ids = ids["input_ids"]
    content = count("policy") + count("question")
    return max(0, (len(ids) - content) // 2)
