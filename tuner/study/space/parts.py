"""The parts of a preset file: the model, the card, the baseline, and what was measured.

`ModelPart` (what the model is and supports: its dtype, drafts, server flags), `GpuPart` (the
accelerator, how many, how many one server spans, and the emulation of a smaller card),
`IntRange`/`FloatRange` (the ranges a search space names), `Baseline` (the first trial),
`ConfirmPart`, `BetweenRunPart` (the recorded run-to-run noise) and `RecordedRunPart` (what a
run cost when it was measured). All are frozen pydantic models with `extra="forbid"`, so a typo
in a preset is an error, not a silent default; `tuner.study.space.preset` puts them together.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from tuner.errors import ConfigError

__all__ = [
    "FROZEN",
    "Baseline",
    "BetweenRunPart",
    "ConfirmPart",
    "FloatRange",
    "GpuPart",
    "IntRange",
    "ModelPart",
    "RecordedRunPart",
]

FROZEN = ConfigDict(frozen=True, extra="forbid")


class IntRange(BaseModel):
    """An integer range searched by Optuna (inclusive)."""

    model_config = FROZEN
    low: int = Field(ge=0)
    high: int
    step: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class FloatRange(BaseModel):
    """A float range searched by Optuna (inclusive)."""

    model_config = FROZEN
    low: float
    high: float
    step: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class ModelPart(BaseModel):
    """What the model is and supports."""

    model_config = FROZEN
    name: str
    checkpoint: str = Field(description="HF id or local path; a test model name is prepared")
    prepare: str | None = Field(default=None, description="test model to build into the cache")
    served_name: str
    max_model_len: int = Field(gt=0)
    hybrid: bool = False
    mtp_layers: int = Field(default=0, ge=0)
    tool_call_parser: str | None = None
    draft_models: dict[str, str] = Field(default_factory=dict)
    load_format: str | None = None
    enable_prefix_caching: bool = True
    server_args: tuple[str, ...] = ()
    server_env: dict[str, str] = Field(default_factory=dict)
    # vLLM's `--dtype`. "auto": the model's own (bf16 on the CPU build). "by-cpu" (CPU presets):
    # a study's plan makes it float32 on a CPU without bf16 instructions, else "auto", and
    # doubles the KV choices for float32 (`tuner.study.preflight.dtype`); the study stores what
    # it chose. A preset used outside a study (benchmarks) runs "by-cpu" as "auto".
    dtype: Literal["auto", "bfloat16", "float16", "float32", "by-cpu"] = "auto"

    def resolved_dtype(self) -> Literal["bfloat16", "float16", "float32"] | None:
        """The `--dtype` the server gets (None: the model's own)."""
        if self.dtype == "auto" or self.dtype == "by-cpu":
            return None
        return self.dtype

    def kv_element_bytes(self) -> int:
        """Bytes of one KV cache element: vLLM's KV cache follows the model's dtype."""
        return 4 if self.dtype == "float32" else 2


class GpuPart(BaseModel):
    """The accelerator: its name, memory, how many, and how many one server spans."""

    model_config = FROZEN
    name: str
    memory_gib: float | None = Field(default=None, gt=0)
    count: int = Field(default=1, ge=1)
    tensor_parallel_size: int = Field(default=1, ge=1)
    # CPU presets: servers need no GPU; Ray slots then reserve none.
    cpu: bool = False
    # Emulating a smaller card on this one: the searched gpu_memory_utilization is a fraction
    # of a card of `emulate_memory_gib`, and `emulate_extra_gib` is memory the served model
    # lacks beside the real one (e.g. a smaller vocabulary's embedding and lm_head), taken off
    # the budget. `memory_gib` is then this card's total memory as vLLM sees it.
    emulate_memory_gib: float | None = Field(default=None, gt=0)
    emulate_extra_gib: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _fits(self) -> GpuPart:
        if self.tensor_parallel_size > self.count:
            raise ValueError(
                f"tensor_parallel_size ({self.tensor_parallel_size}) needs that many GPUs; "
                f"count is {self.count}"
            )
        if self.emulate_memory_gib is None:
            if self.emulate_extra_gib:
                raise ValueError("emulate_extra_gib needs emulate_memory_gib (the emulated card)")
            return self
        if self.cpu or self.memory_gib is None:
            raise ValueError(
                "emulate_memory_gib needs a GPU preset with memory_gib (this card's total GiB)"
            )
        if self.emulate_memory_gib > self.memory_gib:
            raise ValueError(
                f"emulate_memory_gib ({self.emulate_memory_gib}) must not exceed memory_gib "
                f"({self.memory_gib}): a card can only emulate a smaller one"
            )
        return self

    def real_utilization(self, utilization: float) -> float:
        """The fraction of this card that gives the emulated card's `utilization` budget.

        vLLM gives a server `utilization x total memory` for weights, activations and KV cache.
        On the emulated card that is `utilization x emulate_memory_gib`; the served model lacks
        `emulate_extra_gib` that the real one would hold, so this card gets that much less:
        `(utilization x emulate_memory_gib - emulate_extra_gib) / memory_gib`, rounded to 4
        decimals (7 MiB on an H200). Without emulation: `utilization` itself.

        Raises:
            ConfigError: the emulated budget does not cover the memory the stand-in lacks.
        """
        if self.emulate_memory_gib is None or self.memory_gib is None:
            return utilization
        budget = utilization * self.emulate_memory_gib - self.emulate_extra_gib
        if budget <= 0:
            raise ConfigError(
                f"gpu_memory_utilization {utilization} of the emulated {self.emulate_memory_gib} "
                f"GiB card is {utilization * self.emulate_memory_gib:.2f} GiB, not more than "
                f"gpu.emulate_extra_gib ({self.emulate_extra_gib}); raise the utilization"
            )
        return round(budget / self.memory_gib, 4)

    def emulation_record(self, utilization: float) -> dict[str, float]:
        """Both fractions and the arithmetic's inputs, as a trial stores them."""
        emulated, real = self.emulate_memory_gib, self.memory_gib
        if emulated is None or real is None:
            raise ConfigError("this preset emulates no card (gpu.emulate_memory_gib is unset)")
        return {
            "emulated_memory_gib": emulated,
            "real_memory_gib": real,
            "extra_gib": self.emulate_extra_gib,
            "gpu_memory_utilization_emulated": utilization,
            "gpu_memory_utilization_real": self.real_utilization(utilization),
        }

    @property
    def slots(self) -> int:
        """Servers that can run at once."""
        return max(1, self.count // self.tensor_parallel_size)

    @property
    def gpus_per_slot(self) -> int:
        """GPUs one server reserves (Ray's num_gpus per worker); 0 on CPU presets."""
        return 0 if self.cpu else self.tensor_parallel_size


class Baseline(BaseModel):
    """The first trial: no speculation with default memory settings."""

    model_config = FROZEN
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_cache_memory_bytes: PositiveInt | None = None
    max_num_seqs: PositiveInt | None = None
    # Where the space searches the scheduler's token budget (a hybrid at the edge of its
    # memory may only start with a small one), the baseline's; unset: the largest choice.
    max_num_batched_tokens: PositiveInt | None = None


class ConfirmPart(BaseModel):
    """The confirmation stage `tuner optimize` runs at its end (`--confirm K,R` overrides it)."""

    model_config = FROZEN
    top_k: int = Field(ge=0)  # 0: no confirmation
    rounds: PositiveInt


class BetweenRunPart(BaseModel):
    """The preset's recorded run-to-run noise of a round's paired log tasks/h ratio.

    Unset: `tuner.metrics.DEFAULT_NOISE`, measured from repeated starts on the CPU build. A
    preset measured elsewhere sets its own (e.g. from `benchmarks/repeatability.py` repeats).
    """

    model_config = FROZEN
    log_sd: float = Field(gt=0)  # sd of log(candidate tasks/h / baseline tasks/h), one round
    df: int = Field(ge=1)  # the repeats behind it: how much it weighs against the rounds


class RecordedRunPart(BaseModel):
    """What one server run of this model on this GPU cost when it was measured.

    The first line's estimate uses it before anything has run (`tuner.study.search.estimate`):
    a real start of this model, never a tiny model's, which on a GPU is several times shorter.
    Written from a real study's stored trials (`scripts/gpu_study_summary.py --recorded-run`).
    """

    model_config = FROZEN
    startup_s: float = Field(gt=0)  # a start that compiles (the config's first on a machine)
    # A start of a config that started before on this machine (vLLM's compile cache hit).
    warm_startup_s: float | None = Field(default=None, gt=0)
    agent_s_per_task: float = Field(gt=0)  # warm-up tasks included, over the space's methods
    after_s: float = Field(ge=0)  # the probe, the plain benchmark and the stop
    source: str = Field(min_length=1)  # where and when it was measured
