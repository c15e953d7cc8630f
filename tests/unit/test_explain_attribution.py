"""The attribution arithmetic of `tuner explain`, on the published numbers (docs/workload.md)."""

from __future__ import annotations

import pytest

from tuner.results.attribution import attribute


def test_published_mtp_loss_is_two_thirds_memory() -> None:
    # No speculation 752 tasks/h; MTP depth 1 330; no speculation cut to MTP's KV cache 467.
    # Published prefix reuse: 78% of prompt tokens from the cache without MTP, 16% with it.
    a = attribute(
        baseline=752, candidate=330, kv_cut=467, reuse_candidate=0.16, reuse_reference=0.78
    )
    assert a.lost == 422
    assert a.explained_by_memory == 285
    assert a.memory_share == pytest.approx(285 / 422)
    assert 0.66 < a.memory_share < 0.69  # "about two thirds"
    assert a.sentence() == (
        "the smaller KV cache explains 285 of the 422 tasks/h lost (68%); the rest is cache "
        "reuse (steps reusing their whole previous prompt: 16% against 78%)"
    )


def test_the_rest_is_unexplained_when_no_reuse_measure_fell() -> None:
    # An n-gram candidate reusing as much as its control: nothing measured explains the rest.
    a = attribute(
        baseline=700, candidate=500, kv_cut=650, reuse_candidate=0.80, reuse_reference=0.82
    )
    assert a.sentence() == (
        "the smaller KV cache explains 50 of the 200 tasks/h lost (25%); the rest is "
        "unexplained (no reuse measure fell: steps reusing their whole previous prompt: 80% "
        "against 82%)"
    )
    unmeasured = attribute(baseline=700, candidate=500, kv_cut=650)
    assert unmeasured.sentence().endswith("the rest is unexplained (prefix reuse was not measured)")


def test_no_loss_has_nothing_to_explain() -> None:
    a = attribute(baseline=500, candidate=520, kv_cut=490)
    assert a.memory_share is None
    assert "no loss to explain" in a.sentence()


def test_memory_cannot_explain_more_than_the_loss() -> None:
    # Noise can make the KV-cut control lose more than the candidate did: report at most 100%.
    a = attribute(baseline=600, candidate=500, kv_cut=450)
    assert a.explained_by_memory == 150
    assert a.sentence() == "the smaller KV cache explains 100 of the 100 tasks/h lost (100%)"
