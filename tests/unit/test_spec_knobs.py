"""Load knobs of a server: the depth schedule, suffix decoding, max_num_batched_tokens.

Validation follows vLLM's rules (vllm/v1/spec_decode/dynamic/utils.py, config/scheduler.py); the
rendered `--speculative-config` is checked against vLLM's own classes in a subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from tuner.errors import ConfigError
from tuner.server import ServerSpec, SpeculativeSpec
from tuner.server.knobs import _suffix_in
from tuner.study.space import SearchSpace, load_preset

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def test_schedule_renders_sorted_in_the_speculative_config() -> None:
    spec = SpeculativeSpec(**NGRAM, num_speculative_tokens_per_batch_size=[(3, 8, 0), (1, 2, 3)])
    assert spec.config() == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 8, 0]],
    }
    # Given in another order, the same schedule is the same server.
    same = SpeculativeSpec(**NGRAM, num_speculative_tokens_per_batch_size=[(1, 2, 3), (3, 8, 0)])
    assert same == spec


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([], "must not be empty"),
        ([(2, 8, 1)], "first batch-size range must start at 1"),
        ([(1, 4, 2), (4, 8, 1)], "must not overlap"),
        ([(1, 0, 2)], "must be positive"),
        ([(3, 2, 1), (1, 1, 1)], "start must be <= end"),
        ([(1, 8, -1)], "depths must be >= 0"),
        ([(1, 8, 4)], "exceeds num_speculative_tokens=3"),
    ],
)
def test_schedule_rejected_as_vllm_would(schedule: list, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SpeculativeSpec(**NGRAM, num_speculative_tokens_per_batch_size=schedule)


def test_suffix_fields_belong_to_suffix() -> None:
    with pytest.raises(ValidationError, match="applies to method 'suffix' only"):
        SpeculativeSpec(**NGRAM, suffix_decoding_max_tree_depth=8)
    # vLLM defaults suffix decoding's depth to its tree depth: no num_speculative_tokens needed.
    spec = SpeculativeSpec(
        method="suffix", suffix_decoding_max_tree_depth=16, suffix_decoding_max_spec_factor=1.5
    )
    assert spec.config() == {
        "method": "suffix",
        "suffix_decoding_max_tree_depth": 16,
        "suffix_decoding_max_spec_factor": 1.5,
    }
    with pytest.raises(ValidationError):
        SpeculativeSpec(method="suffix", suffix_decoding_min_token_prob=1.5)


def test_max_num_batched_tokens_flag_and_rule() -> None:
    spec = ServerSpec(model="m", max_num_seqs=8, max_num_batched_tokens=2048)
    argv = shlex.split(spec.serve_command())
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "2048"
    with pytest.raises(ConfigError, match=r"max_num_batched_tokens \(4\) must be greater"):
        ServerSpec.checked(model="m", max_num_seqs=8, max_num_batched_tokens=4)
    with pytest.raises(ValidationError, match="duplicates a ServerSpec field"):
        ServerSpec(model="m", extra_args=("--max-num-batched-tokens=64",))


def test_space_offers_the_token_budget_only_above_max_num_seqs() -> None:
    SearchSpace(max_num_seqs=(4, 8), max_num_batched_tokens=(512, 2048))
    with pytest.raises(ValidationError, match=r"max_num_batched_tokens \(4\) must be >= every"):
        SearchSpace(max_num_seqs=(4, 8), max_num_batched_tokens=(4, 2048))


def test_suffix_offered_only_where_arctic_inference_is(tmp_path: Path) -> None:
    # scripts/install.sh builds arctic-inference where it can (docs/vllm-facts.md).
    preset = tmp_path / "p.yaml"
    base = load_preset(model="smollm2-135m", gpu="cpu")
    data = base.model_dump(mode="json")
    data["space"]["methods"] = ["none", "suffix"]
    data["space"]["methods_if_available"] = []
    preset.write_text(json.dumps(data))
    installed = importlib.util.find_spec("arctic_inference") is not None
    if installed:
        assert load_preset(space=preset).space.methods == ("none", "suffix")
    else:
        with pytest.raises(ConfigError, match="method 'suffix' needs the arctic-inference"):
            load_preset(space=preset)
    assert _suffix_in(sys.executable) is installed
    # Another Python whose arctic_inference ships suffix_decoding counts as able.
    fake = tmp_path / "site" / "arctic_inference"
    (fake / "suffix_decoding").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    assert _suffix_in(str(wrapper)) is True
    # ...and one whose arctic_inference lacks it does not (a 0.0.x release).
    (fake / "suffix_decoding").rmdir()
    bare = tmp_path / "python-bare"
    bare.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    assert _suffix_in(str(bare)) is False


VLLM_CHECK = textwrap.dedent(
    """
    import json, sys
    from vllm.config import SpeculativeConfig
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup
    config = json.loads(sys.argv[1])
    spec = SpeculativeConfig(**config)
    lookup = build_dynamic_sd_schedule_lookup(
        spec.num_speculative_tokens_per_batch_size, 8, spec.num_speculative_tokens
    )
    print(json.dumps({"dynamic": spec.uses_dynamic_speculative_decoding(), "lookup": lookup}))
    """
)


@pytest.mark.vllm
def test_vllm_accepts_the_rendered_schedule() -> None:
    """vLLM's own SpeculativeConfig takes the rendered JSON and expands it per batch size."""
    spec = ServerSpec(
        model="m",
        max_num_seqs=8,
        speculative=SpeculativeSpec(
            **NGRAM, num_speculative_tokens_per_batch_size=[(1, 2, 3), (3, 8, 0)]
        ),
    )
    argv = shlex.split(spec.serve_command())
    rendered = argv[argv.index("--speculative-config") + 1]
    done = subprocess.run(
        [sys.executable, "-c", VLLM_CHECK, rendered],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # Index = batch size (0 unused): depth 3 for 1-2 running requests, none from 3 to 8.
    assert out == {"dynamic": True, "lookup": [0, 3, 3, 0, 0, 0, 0, 0, 0]}
