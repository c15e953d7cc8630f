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

__all__ = ["COUNTED_REUSE_CLASSES", "REUSE_CLASSES", "classify_reuse"]

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
