"""Prefix-reuse classes of a step against the previous step's prompt."""

from __future__ import annotations

import pytest

from tuner.workload import REUSE_CLASSES, classify_reuse


@pytest.mark.parametrize(
    ("previous", "cached", "block", "expected"),
    [
        (None, 0, 128, "first"),
        (None, 512, 128, "first"),
        (1000, None, 128, "unknown"),
        (1000, 896, 128, "all"),  # 1000 // 128 * 128 = 896: everything reusable was reused
        (1000, 1024, 128, "all"),  # more than that (generated tokens matched in live mode)
        (1000, 768, 128, "one_block_short"),  # the EAGLE/MTP last-block drop
        (1000, 640, 128, "partial"),
        (1000, 128, 128, "partial"),
        (1000, 0, 128, "none"),
        (100, 0, 128, "all"),  # less than a block: nothing was reusable
        (1000, 992, 16, "all"),
        (1000, 976, 16, "one_block_short"),
        (1000, 960, 16, "partial"),
    ],
)
def test_classify_reuse(
    previous: int | None, cached: int | None, block: int, expected: str
) -> None:
    assert classify_reuse(previous, cached, block) == expected
    assert expected in REUSE_CLASSES
