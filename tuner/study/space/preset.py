"""A whole preset and its search space: what the sampler may choose, and a candidate's server.

`SearchSpace` holds every value vLLM itself would accept; `Preset` checks that its parts fit
together (a method the model supports, a context the model holds, a baseline among the choices),
gives the baseline's params, samples a candidate's params from an Optuna trial (`suggest`) and
turns params into a `ServerSpec` (`server_spec`). It knows nothing of processes.
"""

from __future__ import annotations

from typing import Any

import optuna
from pydantic import (
    BaseModel,
    Field,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tuner.server import EAGLE_STYLE, NEEDS_DRAFT, ServerSpec, SpeculativeMethod, SpeculativeSpec
from tuner.server.knobs import suffix_decoding_available
from tuner.study.space.parts import (
    FROZEN,
    Baseline,
    BetweenRunPart,
    ConfirmPart,
    FloatRange,
    GpuPart,
    IntRange,
    ModelPart,
    RecordedRunPart,
)
from tuner.workload.settings import WorkloadSettings

__all__ = ["DEFAULT_CPU_WINDOW_S", "Preset", "SearchSpace"]

# The scored window a CPU preset aims at when it sets none (`Preset.window_s`): long enough for
# a dozen tasks with two agents on a fast box (about 80 s on the reference Zen 4), short enough
# that six trials and their confirmations stay under the hour on a box four times slower.
DEFAULT_CPU_WINDOW_S = 120.0


class SearchSpace(BaseModel):
    """What the sampler may choose; every value one that vLLM itself would accept."""

    model_config = FROZEN
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


class Preset(BaseModel):
    """A whole preset file."""

    model_config = FROZEN
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
    # on GPU presets (`tuner.study.stages.confirm_plan.ConfirmPlan.for_preset`).
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
