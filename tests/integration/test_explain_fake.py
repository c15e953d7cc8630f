"""`tuner explain` through the real driver and Ray workers, on stand-in servers with GPU blocks.

`tuner.testing.fake_vllm` is the named fake: a GPU preset's explain cuts the baseline's cache
with `--num-gpu-blocks-override`, which the CPU build never takes (CPU presets cut with
`--kv-cache-memory-bytes`, tests/e2e/test_explain.py), and the fake reports a speculative
server's smaller cache (`FAKE_VLLM_SPEC_KV_TOKENS`) and the blocks it was given, as vLLM does.
The real measurement is the H200 study in docs/gpu-validation.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import fake_options, fake_preset, fake_vllm_ray
from tuner.attrs import ControlKind, TrialAttr
from tuner.study import Preset, optimize
from tuner.study.stages.controls import KV_MATCH, explain

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def fake_ray() -> Iterator[None]:
    with fake_vllm_ray(num_gpus=1):
        yield


def test_explain_cuts_the_baseline_to_the_candidates_kv_tokens_in_its_own_blocks(
    fake_ray: None, tmp_path: Path
) -> None:
    server_env = {
        "FAKE_VLLM_STARTUP_S": "0.3",
        "FAKE_VLLM_TOKEN_DELAY_S": "0.005",
        "FAKE_VLLM_KV_TOKENS": "12000",  # 750 blocks of 16
        "FAKE_VLLM_SPEC_KV_TOKENS": "7000",  # 437.5 blocks' worth
    }
    preset = Preset.model_validate(
        fake_preset(
            server_env,
            tasks=4,
            tool_latency_s=0.0,
            gpu={"name": "fake1", "memory_gib": 24, "count": 1},
            throughput_streams=[],
        )
    )
    options = fake_options(tmp_path, 2)
    optimize(preset, options)  # the baseline and the n-gram candidate
    result = explain(options)
    labels = [row.label for row in result.rows]
    assert labels[0].startswith("baseline") and labels[1].startswith("candidate (ngram)")
    cut = result.rows[2]
    # 7,000 / (12,000 / 750) = 437.5 -> 438 blocks -> 7,008 tokens, 0.1% over the candidate's.
    assert cut.kv_cache_tokens == 7008
    assert result.kv_cut_mismatch is not None and abs(result.kv_cut_mismatch) <= KV_MATCH
    assert not any("KV tokens against" in note for note in result.notes)
    assert result.controls_run == 1
    assert "memory explains" in result.split() or result.split() == "no loss to split"
    from tuner.study import open_study

    study = open_study(preset, options)
    control = next(
        t for t in study.trials if t.user_attrs.get(TrialAttr.CONTROL_KIND) == ControlKind.KV_CUT
    )
    assert control.user_attrs[TrialAttr.SPEC_OVERRIDES] == {"num_gpu_blocks_override": 438}
    assert control.user_attrs[TrialAttr.BLOCK_SIZE] == 16
