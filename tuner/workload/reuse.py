"""Prefix reuse of one step against the previous step of the same task.

vLLM caches whole KV blocks, so the most a step can reuse of the previous prompt is that prompt
up to its last full block. Classes (docs/workload.md):

- "all": at least that much was served from the cache;
- "one_block_short": exactly one block less (EAGLE/MTP drafters drop the last block);
- "partial": something, but less;
- "none": nothing;
- "first": the task's first step (nothing of its own to reuse yet);
- "unknown": the server did not report cached tokens (no `--enable-prompt-tokens-details`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tuner.attrs import TrialAttr

__all__ = [
    "COUNTED_REUSE_CLASSES",
    "REUSE_CLASSES",
    "classify_reuse",
    "count_reuse",
    "reuse_phrase",
    "reuse_suffix",
    "three_way",
]

# The classes of a step measured against its previous prompt: what reports count and share out.
COUNTED_REUSE_CLASSES = ("all", "one_block_short", "partial", "none")
REUSE_CLASSES = (*COUNTED_REUSE_CLASSES, "first", "unknown")


def classify_reuse(previous_prompt: int | None, cached: int | None, block_size: int) -> str:
    """The reuse class of a step.

    Args:
        previous_prompt: Prompt tokens of the previous step of the task; None for the first.
        cached: Cached prompt tokens the server reported for this step; None if not reported.
        block_size: The server's KV cache block size in tokens.

    Returns:
        One of `REUSE_CLASSES`.
    """
    if previous_prompt is None:
        return "first"
    if cached is None:
        return "unknown"
    reusable = (previous_prompt // block_size) * block_size
    if cached >= reusable:
        return "all"
    if cached >= reusable - block_size:
        return "one_block_short"
    if cached > 0:
        return "partial"
    return "none"


def count_reuse(classes: Iterable[str]) -> dict[str, int]:
    """Steps per counted class (`COUNTED_REUSE_CLASSES`); first and unknown steps are left out."""
    counts = dict.fromkeys(COUNTED_REUSE_CLASSES, 0)
    for name in classes:
        if name in counts:
            counts[name] += 1
    return counts


def three_way(counts: Mapping[str, int]) -> tuple[int, int, int]:
    """Steps that reused all / were short / reused none, as the published table counts them.

    "short" is one block short or more (`one_block_short` plus `partial`): a step that kept
    some of its previous prompt but not all of it, the class MTP's dropped block lands in.
    """
    return (
        int(counts.get("all", 0)),
        int(counts.get("one_block_short", 0)) + int(counts.get("partial", 0)),
        int(counts.get("none", 0)),
    )


def reuse_phrase(
    counts: Mapping[str, int] | None,
    block_size: int | None = None,
    preemptions: int | None = None,
) -> str:
    """ "reuse all/short/none 66/13/9 (block 400), 9 preemptions"; "" when nothing is known.

    Counts, not shares: with a few dozen steps a run, the reader sees how few they are.
    """
    parts = []
    if counts and sum(three_way(counts)):
        a, s, n = three_way(counts)
        block = f" (block {block_size})" if block_size else ""
        parts.append(f"reuse all/short/none {a}/{s}/{n}{block}")
    if preemptions is not None:
        parts.append(f"{preemptions:,} preemption{'s' if preemptions != 1 else ''}")
    return ", ".join(parts)


def reuse_suffix(user_attrs: Mapping[str, Any]) -> str:
    """ "; reuse all/short/none .../.../... (block B), P preemptions" from a trial's user
    attributes (`tuner.attrs.TrialAttr`), for the progress line; "" when none was stored."""
    counts = user_attrs.get(TrialAttr.REUSE)
    block = user_attrs.get(TrialAttr.BLOCK_SIZE)
    preempt = user_attrs.get(TrialAttr.PREEMPTIONS)
    phrase = reuse_phrase(
        counts if isinstance(counts, Mapping) else None,
        block if isinstance(block, int) else None,
        preempt if isinstance(preempt, int) else None,
    )
    return f"; {phrase}" if phrase else ""
