"""Presets: a model, a GPU and the search space over a vLLM server's speculative configuration.

A preset is a YAML file validated here (`extra="forbid"`, so a typo is an error, not a silent
default). `--model M --gpu G` picks `search_spaces/M/G.yaml`; `--space FILE` takes any file.
`suggest()` turns an Optuna trial into a `ServerSpec`; the space knows nothing of processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import optuna
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tuner.errors import ConfigError
from tuner.server import EAGLE_STYLE, NEEDS_DRAFT, ServerSpec, SpeculativeMethod, SpeculativeSpec
from tuner.server.knobs import suffix_decoding_available
from tuner.workload.settings import WorkloadSettings

__all__ = [
    "DEFAULT_CPU_WINDOW_S",
    "ConfigKey",
    "ConfirmPart",
    "GpuPart",
    "ModelPart",
    "Preset",
    "SearchSpace",
    "config_key",
    "known_presets",
    "load_preset",
    "preset_dir",
]

# A config's identity: its params (what defines its server) as sorted JSON, so it is hashable,
# the same in every process, and reads back into the params (`json.loads`).
ConfigKey = str


def config_key(params: dict[str, Any]) -> ConfigKey:
    """The one name of a config: its params as sorted JSON (`json.loads` gives them back)."""
    return json.dumps(params, sort_keys=True)


_FROZEN = ConfigDict(frozen=True, extra="forbid")
# The scored window a CPU preset aims at when it sets none (`Preset.window_s`): long enough for
# a dozen tasks with two agents on a fast box (about 80 s on the reference Zen 4), short enough
# that six trials and their confirmations stay under the hour on a box four times slower.
DEFAULT_CPU_WINDOW_S = 120.0


class IntRange(BaseModel):
    """An integer range searched by Optuna (inclusive)."""

    model_config = _FROZEN
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

    model_config = _FROZEN
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

    model_config = _FROZEN
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

    model_config = _FROZEN
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


class SearchSpace(BaseModel):
    """What the sampler may choose; every value one that vLLM itself would accept."""

    model_config = _FROZEN
    methods: tuple[SpeculativeMethod, ...] = Field(default=("none", "ngram"), min_length=1)
    # Methods searched only where the installed vLLM can run them, as its capability probe
    # finds at study start (`tuner.study.preflight.checks`): "suffix" needs arctic-inference in
    # vLLM's Python, which `scripts/install.sh` builds where it can. Elsewhere they are left
    # out with one line, and the stored preset is the space actually searched.
    methods_if_available: tuple[SpeculativeMethod, ...] = ()
    # vLLM: num_speculative_tokens, prompt_lookup_min and prompt_lookup_max are >= 1, and
    # prompt_lookup_min <= prompt_lookup_max; max_num_seqs >= 1; 0 < gpu_memory_utilization <= 1.
    num_speculative_tokens: IntRange = IntRange(low=1, high=4)
    prompt_lookup_min: IntRange = IntRange(low=1, high=4)
    prompt_lookup_max: IntRange = IntRange(low=2, high=6)
    gpu_memory_utilization: FloatRange | None = None
    kv_cache_memory_bytes: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    max_num_seqs: tuple[PositiveInt, ...] = Field(default=(256,), min_length=1)
    search_disable_eagle_block_drop: bool = False
    # Load knobs (tuner.study.stages.load_sweep): the scheduler's token budget beside max_num_seqs.
    max_num_batched_tokens: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    # Suffix decoding's own knobs (method "suffix" only; vLLM's SpeculativeConfig names and
    # rules: tree depth >= 1, spec factor >= 0, min token probability in [0, 1]); unset: vLLM's
    # default (24, 1.0, 0.1 in 0.32). Its draft cap is the shared num_speculative_tokens.
    suffix_decoding_max_tree_depth: IntRange | None = None
    suffix_decoding_max_spec_factor: FloatRange | None = None
    suffix_decoding_min_token_prob: FloatRange | None = None

    @field_validator("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max")
    @classmethod
    def _at_least_one(cls, value: IntRange, info: ValidationInfo) -> IntRange:
        if value.low < 1:
            raise ValueError(f"{info.field_name}.low must be >= 1 (vLLM rejects {value.low})")
        return value

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _fraction(cls, value: FloatRange | None) -> FloatRange | None:
        if value is not None and not (value.low > 0 and value.high <= 1):
            raise ValueError(f"must lie in (0, 1]; got {value.low}..{value.high}")
        return value

    @field_validator("methods", "methods_if_available")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"lists a method twice: {list(value)}")
        return value

    @field_validator("suffix_decoding_max_tree_depth")
    @classmethod
    def _tree_depth(cls, value: IntRange | None) -> IntRange | None:
        if value is not None and value.low < 1:
            raise ValueError(f"low must be >= 1 (vLLM rejects {value.low})")
        return value

    @field_validator("suffix_decoding_max_spec_factor")
    @classmethod
    def _spec_factor(cls, value: FloatRange | None) -> FloatRange | None:
        if value is not None and value.low < 0:
            raise ValueError(f"low must be >= 0 (vLLM rejects {value.low})")
        return value

    @field_validator("suffix_decoding_min_token_prob")
    @classmethod
    def _probability(cls, value: FloatRange | None) -> FloatRange | None:
        if value is not None and not (value.low >= 0 and value.high <= 1):
            raise ValueError(f"must lie in [0, 1]; got {value.low}..{value.high}")
        return value

    @model_validator(mode="after")
    def _lookup_ordered(self) -> SearchSpace:
        extra = self.methods_if_available
        if "none" in extra:
            raise ValueError("methods_if_available: 'none' is always available; list it in methods")
        both = sorted(set(extra) & set(self.methods))
        if both:
            raise ValueError(f"methods_if_available repeats {both} of methods; list each once")
        if self.prompt_lookup_min.high > self.prompt_lookup_max.high:
            raise ValueError(
                f"prompt_lookup_min.high ({self.prompt_lookup_min.high}) must be <= "
                f"prompt_lookup_max.high ({self.prompt_lookup_max.high}): vLLM needs "
                "prompt_lookup_min <= prompt_lookup_max"
            )
        batched = self.max_num_batched_tokens
        if batched is not None and min(batched) < max(self.max_num_seqs):
            raise ValueError(
                f"max_num_batched_tokens ({min(batched)}) must be >= every max_num_seqs "
                f"({max(self.max_num_seqs)}): vLLM rejects a smaller token budget"
            )
        return self


class Baseline(BaseModel):
    """The first trial: no speculation with default memory settings."""

    model_config = _FROZEN
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_cache_memory_bytes: PositiveInt | None = None
    max_num_seqs: PositiveInt | None = None
    # Where the space searches the scheduler's token budget (a hybrid at the edge of its
    # memory may only start with a small one), the baseline's; unset: the largest choice.
    max_num_batched_tokens: PositiveInt | None = None


class ConfirmPart(BaseModel):
    """The confirmation stage `tuner optimize` runs at its end (`--confirm K,R` overrides it)."""

    model_config = _FROZEN
    top_k: int = Field(ge=0)  # 0: no confirmation
    rounds: PositiveInt


class BetweenRunPart(BaseModel):
    """The preset's recorded run-to-run noise of a round's paired log tasks/h ratio.

    Unset: `tuner.metrics.DEFAULT_NOISE`, measured from repeated starts on the CPU build. A
    preset measured elsewhere sets its own (e.g. from `benchmarks/repeatability.py` repeats).
    """

    model_config = _FROZEN
    log_sd: float = Field(gt=0)  # sd of log(candidate tasks/h / baseline tasks/h), one round
    df: int = Field(ge=1)  # the repeats behind it: how much it weighs against the rounds


class RecordedRunPart(BaseModel):
    """What one server run of this model on this GPU cost when it was measured.

    The first line's estimate uses it before anything has run (`tuner.study.search.progress`):
    a real start of this model, never a tiny model's, which on a GPU is several times shorter.
    Written from a real study's stored trials (`scripts/gpu_study_summary.py --recorded-run`).
    """

    model_config = _FROZEN
    startup_s: float = Field(gt=0)  # a start that compiles (the config's first on a machine)
    # A start of a config that started before on this machine (vLLM's compile cache hit).
    warm_startup_s: float | None = Field(default=None, gt=0)
    agent_s_per_task: float = Field(gt=0)  # warm-up tasks included, over the space's methods
    after_s: float = Field(ge=0)  # the probe, the plain benchmark and the stop
    source: str = Field(min_length=1)  # where and when it was measured


class Preset(BaseModel):
    """A whole preset file."""

    model_config = _FROZEN
    model: ModelPart
    gpu: GpuPart
    space: SearchSpace
    baseline: Baseline = Baseline()
    workload: WorkloadSettings
    startup_timeout_s: float = Field(default=1800.0, gt=0)
    throughput_streams: tuple[PositiveInt, ...] = (1, 8)
    throughput_requests: int = Field(default=8, ge=1)
    throughput_output_tokens: int = Field(default=128, ge=1)
    # Agent counts `tuner optimize` sweeps its finalists at when it ends (`tuner sweep`).
    load_sweep: tuple[PositiveInt, ...] = ()
    # The confirmation stage; unset: the top 1 candidate and 3 rounds on CPU presets, 2 and 2
    # on GPU presets (`tuner.study.stages.confirm.ConfirmPlan.for_preset`).
    confirm: ConfirmPart | None = None
    # The run-to-run noise the verdicts use (see BetweenRunPart); stored with each study.
    between_run: BetweenRunPart | None = None
    # What a run of this model on this GPU cost, measured (see RecordedRunPart).
    recorded_run: RecordedRunPart | None = None
    # Screen candidates on a prefix of the workload (`tuner.study.search.pruning.ScreenRule`):
    # on in a preset whose recorded grid shows that it pays (docs/decisions.md); `tuner optimize
    # --screening/--no-screening` overrides it.
    screening: bool = False
    # The scored window the workload should fit on this box (seconds): the study's first server
    # measures prefill and decode tokens/s and scales contexts, then tasks, down until the
    # estimate fits (`tuner.study.preflight.calibration`; `--no-calibrate` keeps the preset's
    # sizing). Unset: 120 s on CPU presets, no calibration on GPU presets (their window rule is
    # a lower bound, `tuner.study.preflight.sizing`).
    target_window_s: float | None = Field(default=None, gt=0)

    @property
    def window_s(self) -> float | None:
        """The target scored window calibration sizes to (None: the preset is not calibrated)."""
        if self.target_window_s is not None:
            return self.target_window_s
        if self.gpu.cpu and self.workload.traces is None:
            return DEFAULT_CPU_WINDOW_S
        return None

    @model_validator(mode="after")
    def _supported(self) -> Preset:
        methods = set(self.space.methods)
        # What a preset may offer is checked whether or not the install turns out to have it.
        offered = methods | set(self.space.methods_if_available)
        if "mtp" in offered and self.model.mtp_layers == 0:
            raise ValueError(
                f"method 'mtp' needs a model with MTP layers ({self.model.name} has 0)"
            )
        if self.model.dtype == "by-cpu" and not self.gpu.cpu:
            raise ValueError(
                "model.dtype 'by-cpu' chooses by the CPU's flags, for CPU presets (gpu.cpu: "
                "true); name the dtype instead"
            )
        for method in sorted(NEEDS_DRAFT):
            if method in offered and method not in self.model.draft_models:
                raise ValueError(f"method {method!r} needs model.draft_models.{method}")
        if "suffix" in methods and not suffix_decoding_available():
            raise ValueError(
                "method 'suffix' needs the arctic-inference package in vLLM's Python "
                "(scripts/install.sh builds it for the CPU build); remove it from space.methods "
                "or list it under space.methods_if_available"
            )
        context = self.workload.shape.max_context_tokens
        if self.workload.traces is None and context > self.model.max_model_len:
            raise ValueError(
                f"workload.shape.max_context_tokens ({context}) exceeds model.max_model_len "
                f"({self.model.max_model_len}): every long task would fail; lower one or "
                "raise the other"
            )
        if self.gpu.emulate_memory_gib is not None:
            searched = self.space.gpu_memory_utilization
            if searched is None:
                raise ValueError(
                    "gpu.emulate_memory_gib needs space.gpu_memory_utilization: the emulated "
                    "card's budget is a fraction of it"
                )
            lows = [searched.low]
            if self.baseline.gpu_memory_utilization is not None:
                lows.append(self.baseline.gpu_memory_utilization)
            lowest = min(lows)
            if lowest * self.gpu.emulate_memory_gib <= self.gpu.emulate_extra_gib:
                raise ValueError(
                    f"gpu_memory_utilization {lowest} of the emulated "
                    f"{self.gpu.emulate_memory_gib} GiB card does not cover "
                    f"gpu.emulate_extra_gib ({self.gpu.emulate_extra_gib} GiB)"
                )
        if self.gpu.cpu and self.space.gpu_memory_utilization is not None:
            raise ValueError(
                "a CPU preset searches kv_cache_memory_bytes, not gpu_memory_utilization"
            )
        # The baseline is trial 0 of the same search: Optuna refuses a queued categorical
        # value that is not among the choices (it failed the study's first trial).
        for name in ("kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens"):
            value, choices = getattr(self.baseline, name), getattr(self.space, name)
            if value is not None and choices is not None and value not in choices:
                raise ValueError(
                    f"baseline.{name} ({value}) is not among space.{name} {list(choices)}: "
                    "add it to the space or change the baseline"
                )
        return self

    @property
    def study_name(self) -> str:
        """The default study name: model and GPU."""
        return f"{self.model.name}-{self.gpu.name}"

    # ---- candidates ------------------------------------------------------------------------

    def baseline_params(self) -> dict[str, Any]:
        """Optuna params of the baseline trial (enqueued first)."""
        params: dict[str, Any] = {"method": "none"}
        if self.space.gpu_memory_utilization is not None:
            params["gpu_memory_utilization"] = self.baseline.gpu_memory_utilization or 0.92
        if self.space.kv_cache_memory_bytes is not None:
            params["kv_cache_memory_bytes"] = self.baseline.kv_cache_memory_bytes or max(
                self.space.kv_cache_memory_bytes
            )
        params["max_num_seqs"] = self.baseline.max_num_seqs or max(self.space.max_num_seqs)
        if self.space.max_num_batched_tokens is not None:
            params["max_num_batched_tokens"] = self.baseline.max_num_batched_tokens or max(
                self.space.max_num_batched_tokens
            )
        return params

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample one candidate's params (conditional ones only where they apply)."""
        s = self.space
        params: dict[str, Any] = {"method": trial.suggest_categorical("method", list(s.methods))}
        method = params["method"]
        if method != "none":
            d = s.num_speculative_tokens
            params["num_speculative_tokens"] = trial.suggest_int(
                "num_speculative_tokens", d.low, d.high, step=d.step
            )
        if method == "ngram":
            lo = trial.suggest_int(
                "prompt_lookup_min", s.prompt_lookup_min.low, s.prompt_lookup_min.high
            )
            hi_low = max(lo, s.prompt_lookup_max.low)
            hi = trial.suggest_int(
                "prompt_lookup_max", hi_low, max(hi_low, s.prompt_lookup_max.high)
            )
            params.update(prompt_lookup_min=lo, prompt_lookup_max=hi)
        if s.gpu_memory_utilization is not None:
            g = s.gpu_memory_utilization
            params["gpu_memory_utilization"] = trial.suggest_float(
                "gpu_memory_utilization", g.low, g.high, step=g.step
            )
        if s.kv_cache_memory_bytes is not None:
            params["kv_cache_memory_bytes"] = trial.suggest_categorical(
                "kv_cache_memory_bytes", list(s.kv_cache_memory_bytes)
            )
        params["max_num_seqs"] = trial.suggest_categorical("max_num_seqs", list(s.max_num_seqs))
        if s.max_num_batched_tokens is not None:
            params["max_num_batched_tokens"] = trial.suggest_categorical(
                "max_num_batched_tokens", list(s.max_num_batched_tokens)
            )
        if method == "suffix" and s.suffix_decoding_max_tree_depth is not None:
            t = s.suffix_decoding_max_tree_depth
            params["suffix_decoding_max_tree_depth"] = trial.suggest_int(
                "suffix_decoding_max_tree_depth", t.low, t.high, step=t.step
            )
        if method == "suffix" and s.suffix_decoding_max_spec_factor is not None:
            f = s.suffix_decoding_max_spec_factor
            params["suffix_decoding_max_spec_factor"] = trial.suggest_float(
                "suffix_decoding_max_spec_factor", f.low, f.high, step=f.step
            )
        if method == "suffix" and s.suffix_decoding_min_token_prob is not None:
            p = s.suffix_decoding_min_token_prob
            params["suffix_decoding_min_token_prob"] = trial.suggest_float(
                "suffix_decoding_min_token_prob", p.low, p.high, step=p.step
            )
        if s.search_disable_eagle_block_drop and method in EAGLE_STYLE:
            params["disable_eagle_block_drop"] = trial.suggest_categorical(
                "disable_eagle_block_drop", [False, True]
            )
        return params

    def launched_utilization(self, params: dict[str, Any]) -> float | None:
        """The `--gpu-memory-utilization` a server gets for params (of this card, see
        `GpuPart.real_utilization` when the preset emulates a smaller one)."""
        searched = params.get("gpu_memory_utilization")
        return None if searched is None else self.gpu.real_utilization(float(searched))

    def emulation_record(self, params: dict[str, Any]) -> dict[str, float] | None:
        """What a trial stores of the emulation (None without one or without a utilization)."""
        searched = params.get("gpu_memory_utilization")
        if self.gpu.emulate_memory_gib is None or searched is None:
            return None
        return self.gpu.emulation_record(float(searched))

    def server_spec(self, params: dict[str, Any], *, model_path: str) -> ServerSpec:
        """The server a set of params describes, with the preset's fixed parts."""
        method = params.get("method", "none")
        speculative = None
        if method != "none":
            speculative = SpeculativeSpec(
                method=method,
                num_speculative_tokens=params["num_speculative_tokens"],
                prompt_lookup_min=params.get("prompt_lookup_min"),
                prompt_lookup_max=params.get("prompt_lookup_max"),
                draft_model=self.model.draft_models.get(method),
                disable_eagle_block_drop=bool(params.get("disable_eagle_block_drop", False)),
                suffix_decoding_max_tree_depth=params.get("suffix_decoding_max_tree_depth"),
                suffix_decoding_max_spec_factor=params.get("suffix_decoding_max_spec_factor"),
                suffix_decoding_min_token_prob=params.get("suffix_decoding_min_token_prob"),
            )
        m = self.model
        return ServerSpec(
            model=model_path,
            served_model_name=m.served_name,
            max_model_len=m.max_model_len,
            gpu_memory_utilization=self.launched_utilization(params),
            kv_cache_memory_bytes=params.get("kv_cache_memory_bytes"),
            max_num_seqs=params.get("max_num_seqs"),
            max_num_batched_tokens=params.get("max_num_batched_tokens"),
            enable_prefix_caching=m.enable_prefix_caching,
            tensor_parallel_size=self.gpu.tensor_parallel_size,
            tool_call_parser=m.tool_call_parser,
            load_format=m.load_format,
            dtype=m.resolved_dtype(),
            mtp_layers=m.mtp_layers,
            speculative=speculative,
            extra_args=m.server_args,
            env=dict(m.server_env),
        )


def preset_dir() -> Path:
    """`search_spaces/` in the source tree, or its copy inside an installed wheel."""
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "_search_spaces", package_dir.parent / "search_spaces"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"the search_spaces directory is missing next to {package_dir}")


def known_presets() -> list[tuple[str, str]]:
    """(model, gpu) pairs shipped with tuner."""
    root = preset_dir()
    return sorted((p.parent.name, p.stem) for p in root.glob("*/*.yaml"))


def _known_line() -> str:
    return ", ".join(f"--model {m} --gpu {g}" for m, g in known_presets())


def load_preset(
    *, model: str | None = None, gpu: str | None = None, space: Path | None = None
) -> Preset:
    """Load a preset by name pair or from a file; one clear ConfigError when it is wrong."""
    if space is not None:
        path = Path(space)
        if not path.is_file():
            raise ConfigError(f"search-space file {path} does not exist")
    else:
        if not model or not gpu:
            raise ConfigError(f"give --model and --gpu (known: {_known_line()}) or --space FILE")
        path = preset_dir() / model / f"{gpu}.yaml"
        if not path.is_file():
            raise ConfigError(f"no preset for --model {model} --gpu {gpu}; known: {_known_line()}")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error_line(path, exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset is a mapping with model, gpu, space and workload")
    data = _extended(path, data)
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(text, loc)
        value = err.get("input")
        # The offending scalar helps ("got 0"); a whole mapping or list would not fit a line.
        scalar = isinstance(value, str | int | float) and err["type"] != "extra_forbidden"
        got = f" (got {value!r})" if scalar and len(repr(value)) <= 60 else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{path}{line}: {where}: {message}{got}") from None


def _extended(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """`extends: OTHER.yaml` (a preset file beside this one): that preset's mapping with this
    one's keys laid over it, mapping into mapping; a list or a scalar here replaces the other's.
    One level: the other file may not extend a third."""
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    base_path = path.parent / str(base_name)
    if not base_path.is_file():
        raise ConfigError(
            f"{path}: extends: {base_name} is not a preset file beside it; name one of "
            f"{', '.join(sorted(p.name for p in path.parent.glob('*.yaml')))}"
        )
    try:
        base = yaml.safe_load(base_path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error_line(base_path, exc)) from None
    if not isinstance(base, dict) or "extends" in base:
        raise ConfigError(f"{path}: extends: {base_name} must be a whole preset (one level)")
    return _overlay(base, data)


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            value = _overlay(below, value)
        out[key] = value
    return out


def _yaml_error_line(path: Path, exc: yaml.YAMLError) -> str:
    """`file:line:col: what is wrong` from a YAML error (PyYAML prints several lines)."""
    mark = getattr(exc, "problem_mark", None)
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    reason = f"{context}, {problem}" if context else problem
    return f"{path}{where}: not valid YAML: {reason}; fix the file (YAML indents with spaces)"


def _line_of(text: str, loc: tuple[Any, ...]) -> str:
    """`:line:col` of the YAML node at a validation error's location ('' when not found)."""
    try:
        node: Any = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return ""
    mark = node.start_mark if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if kv[0].value == str(key)), None)
            if match is None:
                break
            mark, node = match[0].start_mark, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            mark = node.start_mark
        else:
            break
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
