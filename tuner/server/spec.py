"""What server to start: `ServerSpec` and its speculative part, validated like vLLM validates them.

A spec renders two ways: `argv()` for the configured launch command (the API server module on
the CPU build, `vllm serve` elsewhere) and `serve_command()`, the `vllm serve MODEL ...` line a
user pastes. Validation mirrors vLLM's own rules (docs/vllm-facts.md) so that a bad candidate
fails here, in one line, instead of after a minute-long start.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tuner.errors import ConfigError, first_error
from tuner.server.knobs import DepthSchedule, check_depth_schedule, suffix_decoding_available
from tuner.settings import LaunchCommand

__all__ = [
    "EAGLE_STYLE",
    "NEEDS_DRAFT",
    "DepthSchedule",
    "ServerSpec",
    "SpeculativeMethod",
    "SpeculativeSpec",
    "check_depth_schedule",
    "suffix_decoding_available",
]

SpeculativeMethod = Literal["none", "ngram", "mtp", "eagle", "eagle3", "draft_model", "suffix"]
# The methods whose drafter is a separate checkpoint (`SpeculativeSpec.draft_model`).
NEEDS_DRAFT: frozenset[SpeculativeMethod] = frozenset({"eagle", "eagle3", "draft_model"})
# vLLM's `use_eagle()`: the drafters that read target hidden states and drop the last block.
EAGLE_STYLE: frozenset[SpeculativeMethod] = frozenset({"eagle", "eagle3", "mtp"})
# Flags that ServerSpec fields render: extra_args may not repeat them, so that one spec is
# one server and equal specs are equal servers.
_FIELD_FLAGS = (
    "--model",
    "--host",
    "--port",
    "--served-model-name",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--kv-cache-memory-bytes",
    "--num-gpu-blocks-override",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--tensor-parallel-size",
    "-tp",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "--enable-prompt-tokens-details",
    "--load-format",
    "--dtype",
)
# What `--dtype` accepts in vLLM (ModelConfig.dtype); "auto" is the same server as no flag.
Dtype = Literal["half", "float16", "bfloat16", "float", "float32"]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Keys under which checkpoints declare their MTP layers (Qwen3-Next/DeepSeek, MiMo and others).
_MTP_CONFIG_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
_SUFFIX_FIELDS = (
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
)


class SpeculativeSpec(BaseModel):
    """The speculative-decoding part of a server: vLLM's `--speculative-config`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: SpeculativeMethod = "none"
    num_speculative_tokens: int | None = Field(default=None, gt=0)
    prompt_lookup_min: int | None = Field(default=None, gt=0)
    prompt_lookup_max: int | None = Field(default=None, gt=0)
    draft_model: str | None = None
    disable_eagle_block_drop: bool = False
    num_speculative_tokens_per_batch_size: DepthSchedule | None = None
    # Suffix decoding (needs the arctic-inference package in vLLM's Python); None: vLLM default.
    suffix_decoding_max_tree_depth: int | None = Field(default=None, ge=1)
    suffix_decoding_max_cached_requests: int | None = Field(default=None, ge=0)
    suffix_decoding_max_spec_factor: float | None = Field(default=None, ge=0)
    suffix_decoding_min_token_prob: float | None = Field(default=None, ge=0, le=1)

    @field_validator("num_speculative_tokens_per_batch_size")
    @classmethod
    def _sorted_schedule(cls, value: DepthSchedule | None) -> DepthSchedule | None:
        # Sorted by batch size, so that equal schedules are equal specs.
        return None if value is None else check_depth_schedule(value)

    @model_validator(mode="after")
    def _check(self) -> SpeculativeSpec:
        method = self.method
        if method == "none":
            set_fields = sorted(
                name for name in self.model_fields_set if name != "method" and getattr(self, name)
            )
            if set_fields:
                raise ValueError(f"method 'none' takes no other options (got {set_fields})")
            return self
        # vLLM defaults suffix decoding's depth to its tree depth; every other method needs one.
        if self.num_speculative_tokens is None and method != "suffix":
            raise ValueError(f"method {method!r} needs num_speculative_tokens > 0")
        suffix_set = [name for name in _SUFFIX_FIELDS if getattr(self, name) is not None]
        if suffix_set and method != "suffix":
            raise ValueError(f"{suffix_set[0]} applies to method 'suffix' only")
        if self.num_speculative_tokens_per_batch_size is not None:
            if self.num_speculative_tokens is None:
                raise ValueError("a depth schedule needs num_speculative_tokens, its top depth")
            check_depth_schedule(
                self.num_speculative_tokens_per_batch_size, self.num_speculative_tokens
            )
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max)
        if method != "ngram" and lookup != (None, None):
            raise ValueError("prompt_lookup_min/max apply to method 'ngram' only")
        lo, hi = lookup
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
        if method in NEEDS_DRAFT and not self.draft_model:
            raise ValueError(f"method {method!r} needs draft_model (a path or model id)")
        if method not in NEEDS_DRAFT and self.draft_model:
            raise ValueError(f"method {method!r} takes no draft_model")
        if self.disable_eagle_block_drop and method not in EAGLE_STYLE:
            raise ValueError("disable_eagle_block_drop applies to eagle, eagle3 and mtp only")
        return self

    def config(self) -> dict[str, Any] | None:
        """The JSON object for `--speculative-config`, or None for no speculation."""
        if self.method == "none":
            return None
        config: dict[str, Any] = {"method": self.method}
        if self.num_speculative_tokens is not None:
            config["num_speculative_tokens"] = self.num_speculative_tokens
        if self.draft_model:
            config["model"] = self.draft_model
        if self.prompt_lookup_min is not None:
            config["prompt_lookup_min"] = self.prompt_lookup_min
        if self.prompt_lookup_max is not None:
            config["prompt_lookup_max"] = self.prompt_lookup_max
        if self.disable_eagle_block_drop:
            config["disable_eagle_block_drop"] = True
        if self.num_speculative_tokens_per_batch_size is not None:
            config["num_speculative_tokens_per_batch_size"] = [
                list(entry) for entry in self.num_speculative_tokens_per_batch_size
            ]
        for name in _SUFFIX_FIELDS:
            if getattr(self, name) is not None:
                config[name] = getattr(self, name)
        return config


def read_mtp_layers(model: str) -> int | None:
    """MTP layers declared in a local checkpoint's config.json; None when it cannot be known."""
    config_path = Path(model) / "config.json"
    if not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        for key in _MTP_CONFIG_KEYS:
            if isinstance(section.get(key), int):
                return int(section[key])
    return 0


class ServerSpec(BaseModel):
    """One vLLM server configuration: everything that changes what the server becomes.

    Fields left as None are not passed, so vLLM's defaults apply. `extra_args` may carry any
    flag that no field renders (and `--speculative-config` when `speculative` is unset);
    `env` is added to the server's environment.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535)
    max_model_len: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    num_gpu_blocks_override: int | None = Field(default=None, gt=0)
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = Field(default=1, ge=1)
    tool_call_parser: str | None = None
    # The workload reads per-request cached tokens, which vLLM reports only with this flag.
    enable_prompt_tokens_details: bool = True
    load_format: str | None = None
    # None: the model's own (vLLM's "auto"; bf16 on the CPU build).
    dtype: Dtype | None = None
    mtp_layers: int | None = Field(default=None, ge=0)
    speculative: SpeculativeSpec | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("speculative", mode="before")
    @classmethod
    def _none_means_no_speculation(cls, value: Any) -> Any:
        # `method: none` and an absent speculative part are the same server; keep them equal.
        if isinstance(value, SpeculativeSpec) and value.method == "none":
            return None
        if isinstance(value, dict) and value.get("method", "none") == "none" and len(value) <= 1:
            return None
        return value

    @field_validator("dtype", mode="before")
    @classmethod
    def _auto_means_none(cls, value: Any) -> Any:
        # `--dtype auto` and no flag are the same server; keep them equal.
        return None if value == "auto" else value

    @field_validator("env")
    @classmethod
    def _check_env(cls, env: dict[str, str]) -> dict[str, str]:
        bad = [name for name in env if not _ENV_NAME.match(name)]
        if bad:
            raise ValueError(f"invalid environment variable names: {bad}")
        return env

    @model_validator(mode="after")
    def _check(self) -> ServerSpec:
        if self.kv_cache_memory_bytes is not None and self.num_gpu_blocks_override is not None:
            raise ValueError("set kv_cache_memory_bytes or num_gpu_blocks_override, not both")
        batched, seqs = self.max_num_batched_tokens, self.max_num_seqs
        if batched is not None and seqs is not None and batched < seqs:
            # vLLM's SchedulerConfig rejects this at startup with the same words.
            raise ValueError(
                f"max_num_batched_tokens ({batched}) must be greater than or equal to "
                f"max_num_seqs ({seqs})"
            )
        spec = self.speculative
        if spec is not None and spec.method == "mtp":
            layers = self.resolved_mtp_layers()
            depth = spec.num_speculative_tokens or 0
            if layers == 0:
                raise ValueError(
                    f"method 'mtp' needs a model with MTP layers; {self.model} declares none "
                    "(num_nextn_predict_layers is 0 or absent)"
                )
            if layers is not None and depth > layers and depth % layers != 0:
                raise ValueError(
                    f"num_speculative_tokens={depth} must be divisible by the model's "
                    f"{layers} MTP layers"
                )
        self._check_extra_args()
        return self

    def _check_extra_args(self) -> None:
        reserved = set(_FIELD_FLAGS)
        # A raw `--speculative-config` is the way to pass what SpeculativeSpec cannot express
        # (other methods, newer keys); it must not compete with the speculative field.
        if self.speculative is not None:
            reserved.add("--speculative-config")
        for arg in self.extra_args:
            if not arg or "\0" in arg:
                raise ValueError(f"invalid extra argument {arg!r}")
            flag = arg.split("=", 1)[0]
            if flag in reserved:
                raise ValueError(
                    f"extra argument {flag} duplicates a ServerSpec field; set the field"
                )

    def __hash__(self) -> int:
        # pydantic's frozen hash fails on the `env` dict; the JSON form is canonical enough.
        return hash(self.model_dump_json())

    @classmethod
    def checked(cls, **fields: Any) -> ServerSpec:
        """Build a spec, turning a validation error into one `ConfigError` line."""
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise ConfigError(f"invalid server spec: {_first_error(exc)}") from None

    def replace(self, **changes: Any) -> ServerSpec:
        """A copy with `changes` applied and validated again (e.g. a lower max_num_seqs)."""
        return self.checked(**{**self.model_dump(exclude_unset=False), **changes})

    def resolved_mtp_layers(self) -> int | None:
        """MTP layers: as declared, else read from a local config.json; None if unknown."""
        if self.mtp_layers is not None:
            return self.mtp_layers
        return read_mtp_layers(self.model)

    def speculative_config(self) -> dict[str, Any] | None:
        """The `--speculative-config` object, or None when the server does not speculate."""
        return self.speculative.config() if self.speculative is not None else None

    def _field_flags(self) -> list[tuple[str, str | None]]:
        """(flag, value) pairs for every field that is set; value None for a bare switch."""
        pairs: list[tuple[str, str | None]] = []
        numeric = (
            ("--max-model-len", self.max_model_len),
            ("--gpu-memory-utilization", self.gpu_memory_utilization),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--kv-cache-memory-bytes", self.kv_cache_memory_bytes),
            ("--num-gpu-blocks-override", self.num_gpu_blocks_override),
        )
        pairs.extend((flag, str(value)) for flag, value in numeric if value is not None)
        if self.tensor_parallel_size != 1:
            pairs.append(("--tensor-parallel-size", str(self.tensor_parallel_size)))
        if self.tool_call_parser:
            pairs.append(("--enable-auto-tool-choice", None))
            pairs.append(("--tool-call-parser", self.tool_call_parser))
        if self.enable_prompt_tokens_details:
            pairs.append(("--enable-prompt-tokens-details", None))
        if self.load_format:
            pairs.append(("--load-format", self.load_format))
        if self.dtype:
            pairs.append(("--dtype", self.dtype))
        config = self.speculative_config()
        if config is not None:
            pairs.append(("--speculative-config", json.dumps(config, separators=(",", ":"))))
        return pairs

    def _flags(self) -> list[str]:
        # vLLM's default for prefix caching depends on the model; always say what we mean.
        flags = [
            "--enable-prefix-caching"
            if self.enable_prefix_caching
            else "--no-enable-prefix-caching"
        ]
        for flag, value in self._field_flags():
            flags.append(flag)
            if value is not None:
                flags.append(value)
        flags.extend(self.extra_args)
        return flags

    def _names(self) -> list[str]:
        return ["--served-model-name", self.served_model_name] if self.served_model_name else []

    def argv(self, launch: LaunchCommand, port: int) -> list[str]:
        """The argv that starts this server with `launch` on `port` (no shell involved)."""
        model = [self.model] if launch.model_positional else ["--model", self.model]
        address = ["--host", self.host, "--port", str(port)]
        return [*launch.argv, *model, *self._names(), *address, *self._flags()]

    def serve_command(self) -> str:
        """The `vllm serve MODEL ...` command a user pastes, quoted for a POSIX shell.

        Environment variables of the spec come first (`NAME=value vllm serve ...`); the port
        only when the spec fixes one.
        """
        address = ["--host", self.host]
        if self.port is not None:
            address += ["--port", str(self.port)]
        argv = ["vllm", "serve", self.model, *self._names(), *address, *self._flags()]
        env = [f"{name}={shlex.quote(value)}" for name, value in sorted(self.env.items())]
        return " ".join([*env, shlex.join(argv)])


def _first_error(exc: ValidationError) -> str:
    where, message = first_error(exc)
    message = message.removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
