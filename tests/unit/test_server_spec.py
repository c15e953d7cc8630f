"""ServerSpec: validation mirrors vLLM's rules; argv and `vllm serve` rendering round-trip."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tuner.errors import ConfigError
from tuner.server import ServerSpec, SpeculativeSpec
from tuner.settings import LaunchCommand

API_SERVER = LaunchCommand(("python", "-m", "vllm.entrypoints.openai.api_server"))
VLLM_SERVE = LaunchCommand(("vllm", "serve"))


def _flag_values(argv: list[str]) -> dict[str, str | None]:
    """`--flag value` and bare `--switch` pairs of an argv (after the model)."""
    values: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not nxt.startswith("--"):
                values[argv[i]] = nxt
                i += 2
                continue
            values[argv[i]] = None
        i += 1
    return values


def _mtp_model(tmp_path: Path, layers: int | None) -> str:
    config: dict[str, Any] = {"architectures": ["Qwen3NextForCausalLM"]}
    if layers is not None:
        config["num_nextn_predict_layers"] = layers
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_serve_command_round_trips_through_a_shell_split() -> None:
    spec = ServerSpec(
        model="Qwen/Qwen3.8-27B",
        served_model_name="qwen",
        port=8000,
        max_model_len=16384,
        gpu_memory_utilization=0.9,
        max_num_seqs=4,
        tool_call_parser="hermes",
        speculative=SpeculativeSpec(
            method="ngram", num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=4
        ),
        extra_args=("--enforce-eager",),
    )
    argv = shlex.split(spec.serve_command())
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3.8-27B"]
    flags = _flag_values(argv[3:])
    assert flags["--served-model-name"] == "qwen"
    assert flags["--port"] == "8000"
    assert flags["--max-model-len"] == "16384"
    assert flags["--gpu-memory-utilization"] == "0.9"
    assert flags["--max-num-seqs"] == "4"
    assert flags["--tool-call-parser"] == "hermes"
    assert "--enable-auto-tool-choice" in flags
    assert "--enable-prefix-caching" in flags
    assert "--enable-prompt-tokens-details" in flags
    assert "--enforce-eager" in flags
    config = json.loads(flags["--speculative-config"] or "")
    assert config == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert config == spec.speculative_config()


def test_argv_passes_the_model_as_the_launch_command_expects() -> None:
    spec = ServerSpec(model="/models/m", kv_cache_memory_bytes=2_000_000_000)
    module = spec.argv(API_SERVER, 9001)
    assert module[:5] == [*API_SERVER.argv, "--model", "/models/m"]
    serve = spec.argv(VLLM_SERVE, 9001)
    assert serve[:3] == ["vllm", "serve", "/models/m"]
    flags = _flag_values(module[5:])
    assert flags["--port"] == "9001"
    assert flags["--host"] == "127.0.0.1"
    assert flags["--kv-cache-memory-bytes"] == "2000000000"
    assert "--speculative-config" not in flags
    assert spec.speculative_config() is None


def test_prefix_caching_off_and_dummy_weights_are_rendered() -> None:
    spec = ServerSpec(model="m", enable_prefix_caching=False, load_format="dummy")
    flags = _flag_values(spec.argv(VLLM_SERVE, 1234)[3:])
    assert "--no-enable-prefix-caching" in flags
    assert "--enable-prefix-caching" not in flags
    assert flags["--load-format"] == "dummy"


def test_env_is_shown_in_the_serve_command() -> None:
    spec = ServerSpec(model="m", env={"VLLM_CPU_KVCACHE_SPACE": "2 GiB"})
    assert spec.serve_command().startswith("VLLM_CPU_KVCACHE_SPACE='2 GiB' vllm serve m ")


def test_method_none_is_the_same_server_as_no_speculation() -> None:
    assert ServerSpec(model="m", speculative={"method": "none"}) == ServerSpec(model="m")
    assert ServerSpec(model="m", speculative=SpeculativeSpec()).speculative is None


def test_eagle_block_drop_switch_goes_into_the_config() -> None:
    spec = SpeculativeSpec(
        method="eagle3", num_speculative_tokens=2, draft_model="d", disable_eagle_block_drop=True
    )
    assert spec.config() == {
        "method": "eagle3",
        "num_speculative_tokens": 2,
        "model": "d",
        "disable_eagle_block_drop": True,
    }


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"method": "ngram"}, "needs num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "greater than 0"),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5}
            | {"prompt_lookup_max": 2},
            "prompt_lookup_min=5 must be <= prompt_lookup_max=2",
        ),
        ({"method": "eagle", "num_speculative_tokens": 2}, "needs draft_model"),
        ({"method": "draft_model", "num_speculative_tokens": 2}, "needs draft_model"),
        ({"method": "ngram", "num_speculative_tokens": 2, "draft_model": "d"}, "no draft_model"),
        ({"method": "suffix", "num_speculative_tokens": 2, "draft_model": "d"}, "no draft_model"),
        (
            {"method": "mtp", "num_speculative_tokens": 1, "prompt_lookup_max": 3},
            "apply to method 'ngram' only",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 1, "disable_eagle_block_drop": True},
            "eagle, eagle3 and mtp only",
        ),
        ({"method": "none", "num_speculative_tokens": 3}, "takes no other options"),
        ({"method": "medusa", "num_speculative_tokens": 3}, "Input should be"),
        ({"method": "ngram", "num_speculative_tokens": 3, "bogus": 1}, "Extra inputs"),
    ],
)
def test_speculative_rules_fail_with_a_clear_reason(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        SpeculativeSpec(**fields)


def test_mtp_needs_a_model_with_mtp_layers(tmp_path: Path) -> None:
    mtp = {"method": "mtp", "num_speculative_tokens": 2}
    with pytest.raises(ValidationError, match="needs a model with MTP layers"):
        ServerSpec(model=_mtp_model(tmp_path, None), speculative=mtp)
    with pytest.raises(ValidationError, match="needs a model with MTP layers"):
        ServerSpec(model="org/remote-model", mtp_layers=0, speculative=mtp)
    spec = ServerSpec(model=_mtp_model(tmp_path, 1), speculative=mtp)
    assert spec.resolved_mtp_layers() == 1
    # A hub id without a declared count cannot be checked here; vLLM decides.
    assert ServerSpec(model="org/remote", speculative=mtp).resolved_mtp_layers() is None


def test_mtp_depth_must_be_a_multiple_of_the_layers_beyond_them(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="must be divisible by the model's 2 MTP layers"):
        ServerSpec(
            model="m", mtp_layers=2, speculative={"method": "mtp", "num_speculative_tokens": 3}
        )
    ok = ServerSpec(
        model="m", mtp_layers=2, speculative={"method": "mtp", "num_speculative_tokens": 4}
    )
    assert ok.speculative_config() == {"method": "mtp", "num_speculative_tokens": 4}


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"kv_cache_memory_bytes": 10, "num_gpu_blocks_override": 5}, "not both"),
        ({"gpu_memory_utilization": 1.5}, "less than or equal to 1"),
        ({"max_num_seqs": 0}, "greater than 0"),
        ({"port": 70000}, "less than or equal to 65535"),
        ({"extra_args": ("--port", "1")}, "duplicates a ServerSpec field"),
        ({"extra_args": ("--max-num-seqs=4",)}, "duplicates a ServerSpec field"),
        ({"extra_args": ("--no-enable-prefix-caching",)}, "duplicates a ServerSpec field"),
        ({"env": {"BAD NAME": "1"}}, "invalid environment variable names"),
        ({"model": ""}, "at least 1 character"),
    ],
)
def test_server_rules_fail_with_a_clear_reason(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        ServerSpec(**{"model": "m", **fields})


def test_speculative_config_flag_is_free_only_without_a_speculative_field() -> None:
    raw = ("--speculative-config", '{"method":"ngram","num_speculative_tokens":2}')
    assert ServerSpec(model="m", extra_args=raw).argv(VLLM_SERVE, 1)[-2:] == list(raw)
    with pytest.raises(ValidationError, match="duplicates"):
        ServerSpec(
            model="m",
            extra_args=raw,
            speculative={"method": "ngram", "num_speculative_tokens": 2},
        )


def test_checked_and_replace_give_one_config_error_line() -> None:
    spec = ServerSpec.checked(model="m", max_num_seqs=512)
    lowered = spec.replace(max_num_seqs=501)
    assert lowered.max_num_seqs == 501
    assert lowered.model == "m"
    with pytest.raises(ConfigError, match=r"^invalid server spec: max_num_seqs: .*greater than 0"):
        spec.replace(max_num_seqs=0)
    with pytest.raises(ConfigError, match=r"speculative\.method: Input should be"):
        ServerSpec.checked(model="m", speculative={"method": "magic"})


def test_specs_are_frozen_and_hashable() -> None:
    spec = ServerSpec(model="m", env={"A": "1"})
    assert {spec: 1}[ServerSpec(model="m", env={"A": "1"})] == 1
    assert hash(spec) != hash(spec.replace(env={"A": "2"}))
    with pytest.raises(ValidationError, match="frozen"):
        spec.max_num_seqs = 3  # type: ignore[misc]
