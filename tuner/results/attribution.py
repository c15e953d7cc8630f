"""How much of a candidate's loss against the baseline its smaller KV cache explains.

Pure arithmetic on measured tasks/h (and full-prompt reuse shares): `tuner explain`
(`tuner.study.stages.controls`) states it after running its controls, and `tuner report` restates it
from the stored trials.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["REUSE_DROP", "Attribution", "attribute"]


@dataclass(frozen=True)
class Attribution:
    """How much of a candidate's loss against the baseline the smaller KV cache explains."""

    baseline: float
    candidate: float
    kv_cut: float
    # Share of steps that reused their whole previous prompt: the candidate's, and the
    # reference's (the KV-cut control's, else the baseline's). None: not measured.
    reuse_candidate: float | None = None
    reuse_reference: float | None = None

    @property
    def lost(self) -> float:
        """Tasks/h the candidate lost against the baseline."""
        return self.baseline - self.candidate

    @property
    def explained_by_memory(self) -> float:
        """Tasks/h the baseline loses when cut to the candidate's KV cache."""
        return self.baseline - self.kv_cut

    @property
    def memory_share(self) -> float | None:
        """Fraction of the loss that memory explains (None when nothing was lost)."""
        return self.explained_by_memory / self.lost if self.lost > 0 else None

    def sentence(self) -> str:
        """The one-line answer."""
        if self.lost <= 0:
            return (
                f"the candidate lost nothing against the baseline ({self.candidate:.0f} vs "
                f"{self.baseline:.0f} tasks/h); there is no loss to explain"
            )
        share = self.memory_share or 0.0
        explained = max(0.0, min(self.explained_by_memory, self.lost))
        head = (
            f"the smaller KV cache explains {explained:.0f} of the {self.lost:.0f} tasks/h lost "
            f"({100 * max(0.0, min(share, 1.0)):.0f}%)"
        )
        if explained >= self.lost:
            return head
        return f"{head}; {self.remainder()}"

    def remainder(self) -> str:
        """What the loss beyond memory is put down to: cache reuse only where it was measured
        to fall (by `REUSE_DROP` of the steps or more), otherwise "unexplained"."""
        cand, ref = self.reuse_candidate, self.reuse_reference
        if cand is None or ref is None:
            return "the rest is unexplained (prefix reuse was not measured)"
        measured = f"steps reusing their whole previous prompt: {cand:.0%} against {ref:.0%}"
        if ref - cand >= REUSE_DROP:
            return f"the rest is cache reuse ({measured})"
        return f"the rest is unexplained (no reuse measure fell: {measured})"


# A drop in full-prompt reuse smaller than this (share of steps) is within run-to-run noise.
REUSE_DROP = 0.05


def attribute(
    baseline: float,
    candidate: float,
    kv_cut: float,
    *,
    reuse_candidate: float | None = None,
    reuse_reference: float | None = None,
) -> Attribution:
    """Split `baseline - candidate` into the KV-cache part and the rest (reuse or unexplained)."""
    return Attribution(baseline, candidate, kv_cut, reuse_candidate, reuse_reference)
