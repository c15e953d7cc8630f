"""When a speculative method counts as covered by a GPU study (imported by tests/gpu and by its
unit test in tests/unit/test_gpu_coverage.py; no GPU needed to import it).

A method is covered when one of its trials served its workload and drafted, or, for MTP on a
vLLM known to crash on hybrid models, when an MTP trial was recorded infeasible with vLLM's own
root cause. vLLM 0.26.0's MTP on Gated DeltaNet hybrids died at the first request under CUDA
graphs on the tiny hybrid (CUDA illegal memory access, surfacing as EngineDeadError), with or
without `--no-async-scheduling`; on the 27B-shaped one it served at 4 sequences
(docs/gpu-validation.md). Either outcome is evidence; a test that demanded a served MTP trial
on 0.26.0 could not pass with the tiny hybrid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MTP_CRASHES_ON", "MTP_ROOT_CAUSE", "TrialView", "uncovered_methods"]

# vLLM versions whose MTP crashes on hybrid models at the first request (seen on an H200).
MTP_CRASHES_ON = frozenset({"0.26.0"})
# vLLM's words for that crash, as tuner records them in the trial's failure reason.
MTP_ROOT_CAUSE = re.compile(r"illegal memory access|EngineDeadError|AcceleratorError")


@dataclass(frozen=True)
class TrialView:
    """What the rule reads of a finished trial."""

    method: str
    infeasible: bool
    failure_kind: str | None = None
    failure_reason: str | None = None
    drafted: bool = False  # its workload run counted speculative drafts

    @classmethod
    def of(cls, params: Mapping[str, Any], attrs: Mapping[str, Any], drafted: bool) -> TrialView:
        return cls(
            method=str(params.get("method", "none")),
            infeasible=bool(attrs.get("infeasible")),
            failure_kind=attrs.get("failure_kind"),
            failure_reason=attrs.get("failure_reason"),
            drafted=drafted,
        )


def _mtp_crash_recorded(t: TrialView, vllm_version: str) -> bool:
    return (
        t.method == "mtp"
        and vllm_version in MTP_CRASHES_ON
        and t.infeasible
        and t.failure_kind in ("server_died", "crashed")
        and MTP_ROOT_CAUSE.search(t.failure_reason or "") is not None
    )


def uncovered_methods(
    trials: Iterable[TrialView], vllm_version: str, wanted: Iterable[str] = ("none", "ngram", "mtp")
) -> set[str]:
    """The wanted methods no trial covers (empty: the study covered them all)."""
    covered: set[str] = set()
    for t in trials:
        served = not t.infeasible and (t.method == "none" or t.drafted)
        if served or _mtp_crash_recorded(t, vllm_version):
            covered.add(t.method)
    return set(wanted) - covered
