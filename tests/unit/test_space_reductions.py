"""The space knows the workload: knob values that cannot matter for it are not searched.

Checked on the shipped presets (CPU: 2 agents; GPU: 4), with the real prepared model configs,
and through the driver's `reduce_space` on a real SQLite study.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import stub_cluster_join
from tuner.study.preflight.sizing import (
    in_flight,
    kv_bytes_per_token,
    read_model_config,
    workload_reductions,
)
from tuner.study.search.driver import open_study, reduce_space
from tuner.study.search.options import OptimizeOptions
from tuner.study.search.sampling import enumerate_space
from tuner.study.space import Preset, config_key, load_preset

GRID = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "grid-smollm2-135m-cpu.json"


def _with(preset: Preset, **workload: object) -> Preset:
    return preset.model_copy(update={"workload": preset.workload.model_copy(update=workload)})


def test_bytes_per_token_from_the_config_match_what_vllm_allocated(smollm2_path: Path) -> None:
    per_token = kv_bytes_per_token(read_model_config(str(smollm2_path)) or {})
    assert per_token is not None
    # The recorded grid: vLLM's CPU build reported its KV cache in tokens for each size.
    for run in json.loads(GRID.read_text())["runs"]:
        measured = run["params"]["kv_cache_memory_bytes"] / run["kv_cache_tokens"]
        assert per_token == pytest.approx(measured, rel=0.01)


def test_a_hybrid_config_is_not_sized(tiny_hybrid_path: Path) -> None:
    assert kv_bytes_per_token(read_model_config(str(tiny_hybrid_path)) or {}) is None
    assert read_model_config("HuggingFaceTB/SmolLM2-135M-Instruct") is None  # not local


def test_the_cpu_preset_drops_the_kv_size_between_the_smallest_that_holds_and_the_baseline(
    smollm2_path: Path,
) -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    reduced, cuts = workload_reductions(preset, model_config=read_model_config(str(smollm2_path)))
    assert [c.knob for c in cuts] == ["kv_cache_memory_bytes"]
    assert reduced.space.kv_cache_memory_bytes == (300_000_000, 2_000_000_000)
    # max_num_seqs 4 and 8 both cover the 2 agents; 4 is the smallest, 8 the baseline's.
    assert reduced.space.max_num_seqs == (4, 8)
    assert "2 agents x 3072 context tokens" in cuts[0].line() and "142 MB" in cuts[0].line()
    before, after = enumerate_space(preset), enumerate_space(reduced)
    assert before is not None and after is not None
    assert (len(before), len(after)) == (270, 180)
    assert config_key(preset.baseline_params()) in {config_key(p) for p in after}


@pytest.mark.parametrize(
    ("model", "gpu", "seqs"),
    [
        ("smollm2-135m", "h200", (8, 256)),
        ("qwen3.8-27b", "rtx4090", (4, 512)),
        ("qwen3.8-27b", "rtx-pro-6000", (8, 512)),
        ("tiny-hybrid-mtp", "h200", (16, 512)),
    ],
)
def test_gpu_presets_keep_the_smallest_max_num_seqs_covering_4_agents_and_the_baseline(
    model: str, gpu: str, seqs: tuple[int, ...], smollm2_path: Path, tiny_hybrid_path: Path
) -> None:
    preset = load_preset(model=model, gpu=gpu)
    path = {"smollm2-135m": smollm2_path, "tiny-hybrid-mtp": tiny_hybrid_path}.get(model)
    config = read_model_config(str(path)) if path else None
    reduced, cuts = workload_reductions(preset, model_config=config)
    assert in_flight(preset) == 4
    assert reduced.space.max_num_seqs == seqs
    assert [c.knob for c in cuts] == (["max_num_seqs"] if seqs != preset.space.max_num_seqs else [])
    # Memory: gpu_memory_utilization is never cut, nor a hybrid's KV bytes.
    assert reduced.space.gpu_memory_utilization == preset.space.gpu_memory_utilization
    assert reduced.space.kv_cache_memory_bytes == preset.space.kv_cache_memory_bytes
    assert reduced.baseline_params() == preset.baseline_params()


def test_values_below_the_need_are_kept_and_the_load_sweep_raises_it() -> None:
    preset = load_preset(model="smollm2-135m", gpu="h200")
    preset = preset.model_copy(
        update={"space": preset.space.model_copy(update={"max_num_seqs": (8, 16, 64, 256)})}
    )
    reduced, _ = workload_reductions(_with(preset, agents=12), model_config=None)
    assert reduced.space.max_num_seqs == (8, 16, 256)  # 8 throttles 12 agents: it can matter
    # The finalists are swept at 12 agents with the same config: the need is 12, not 4.
    swept = preset.model_copy(update={"load_sweep": (4, 12)})
    reduced, cuts = workload_reductions(swept, model_config=None)
    assert reduced.space.max_num_seqs == (8, 16, 256)
    assert "load sweep up to 12" in cuts[0].line()


def test_a_workload_whose_contexts_fill_every_choice_keeps_them_all(smollm2_path: Path) -> None:
    preset = _with(load_preset(model="smollm2-135m", gpu="cpu"), agents=40)
    # 40 x 3072 x 23040 bytes = 2.8 GB: no choice holds it, each one can matter.
    reduced, cuts = workload_reductions(preset, model_config=read_model_config(str(smollm2_path)))
    assert reduced.space.kv_cache_memory_bytes == preset.space.kv_cache_memory_bytes
    assert cuts == [] and reduced == preset  # max_num_seqs 4 and 8 both throttle 40 agents


def test_the_driver_says_each_cut_and_full_space_or_an_older_study_keeps_it(
    sqlite_url: str, smollm2_path: Path, tmp_path: Path
) -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    said: list[str] = []
    options = OptimizeOptions(storage_url=sqlite_url, cache_dir=tmp_path, study_name="s")
    reduced, lines = reduce_space(preset, options, str(smollm2_path), said.append)
    assert reduced.space.kv_cache_memory_bytes == (300_000_000, 2_000_000_000)
    assert len(lines) == 1 and said == [f"{lines[0]} (--full-space searches every value)"]
    full = OptimizeOptions(
        storage_url=sqlite_url, cache_dir=tmp_path, study_name="s", full_space=True
    )
    assert reduce_space(preset, full, str(smollm2_path), said.append) == (preset, [])
    # A study that searched the full space before keeps it when resumed without the flag.
    open_study(preset, full)
    said.clear()
    kept, lines = reduce_space(preset, options, str(smollm2_path), said.append)
    assert kept == preset and lines == []
    assert said and "full space before" in said[0]


def test_tuner_optimize_passes_full_space_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import tuner.study.pipeline as pipeline
    from tuner.cli import app

    seen: list[OptimizeOptions] = []

    def capture(_preset: object, options: OptimizeOptions, **_: object) -> None:
        seen.append(options)
        raise SystemExit(0)  # the options are what this test checks; the study is not run

    monkeypatch.setattr(pipeline, "optimize", capture)
    # --ray-address: the command would join a cluster (never reached: see stub_cluster_join).
    stub_cluster_join(monkeypatch)
    base = ["optimize", "--model", "smollm2-135m", "--gpu", "cpu", "--ray-address",
            "127.0.0.1:1", "--storage", f"sqlite:///{tmp_path / 't.db'}"]  # fmt: skip
    for args in (base, [*base, "--full-space"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    assert [o.full_space for o in seen] == [False, True]
