"""Prefix-reuse classes of a step against the previous step's prompt."""

from __future__ import annotations

import pytest

from tuner.attrs import TrialAttr
from tuner.workload import REUSE_CLASSES, classify_reuse
from tuner.workload.reuse import count_reuse, reuse_phrase, reuse_suffix, three_way


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


def test_three_way_folds_one_block_short_and_partial_into_short() -> None:
    # The published table's classes: a step that kept some but not all of its previous prompt
    # is "short", whether it lost one block (MTP's drop) or more.
    counts = count_reuse(["first", "all", "all", "one_block_short", "partial", "none", "unknown"])
    assert counts == {"all": 2, "one_block_short": 1, "partial": 1, "none": 1}
    assert three_way(counts) == (2, 2, 1)


def test_reuse_phrase_and_the_progress_suffix() -> None:
    counts = {"all": 66, "one_block_short": 5, "partial": 8, "none": 9}
    assert reuse_phrase(counts, 400, 9) == "reuse all/short/none 66/13/9 (block 400), 9 preemptions"
    assert reuse_phrase(None, None, 1) == "1 preemption"
    assert reuse_phrase({"all": 0, "none": 0}, 16, None) == ""
    attrs = {TrialAttr.REUSE: counts, TrialAttr.BLOCK_SIZE: 416, TrialAttr.PREEMPTIONS: 0}
    assert reuse_suffix(attrs) == "; reuse all/short/none 66/13/9 (block 416), 0 preemptions"
    assert reuse_suffix({}) == ""
