"""The GPU tests' rule for when MTP and n-gram count as covered (tests/gpu/coverage.py)."""

from __future__ import annotations

from tests.gpu.coverage import TrialView, uncovered_methods

BASE = TrialView("none", infeasible=False)
NGRAM = TrialView("ngram", infeasible=False, drafted=True)
# What tuner recorded for vLLM 0.26.0's MTP crash on the tiny hybrid (docs/gpu-validation.md).
MTP_CRASH = TrialView(
    "mtp",
    infeasible=True,
    failure_kind="server_died",
    failure_reason="the vLLM server died at its first request (exit status 0): AcceleratorError: "
    "CUDA error: an illegal memory access was encountered",
)


def test_a_recorded_mtp_crash_covers_mtp_on_a_version_known_to_crash() -> None:
    assert uncovered_methods([BASE, NGRAM, MTP_CRASH], "0.26.0") == set()


def test_the_same_crash_on_another_version_is_a_failure() -> None:
    assert uncovered_methods([BASE, NGRAM, MTP_CRASH], "0.32.0") == {"mtp"}


def test_an_mtp_failure_without_vllms_root_cause_does_not_count() -> None:
    vague = TrialView("mtp", infeasible=True, failure_kind="server_died", failure_reason="died")
    assert uncovered_methods([BASE, NGRAM, vague], "0.26.0") == {"mtp"}
    no_memory = TrialView(
        "mtp",
        infeasible=True,
        failure_kind="no_cache_memory",
        failure_reason="No available memory for the cache blocks.",
    )
    assert uncovered_methods([BASE, NGRAM, no_memory], "0.26.0") == {"mtp"}


def test_a_measured_mtp_trial_covers_mtp_on_any_version() -> None:
    served = TrialView("mtp", infeasible=False, drafted=True)
    assert uncovered_methods([BASE, NGRAM, served], "0.32.0") == set()


def test_a_speculative_trial_that_never_drafted_does_not_count() -> None:
    idle = TrialView("ngram", infeasible=False, drafted=False)
    assert uncovered_methods([BASE, idle, MTP_CRASH], "0.26.0") == {"ngram"}
    assert uncovered_methods([NGRAM, MTP_CRASH], "0.26.0") == {"none"}
