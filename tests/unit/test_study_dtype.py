"""A CPU preset's `dtype: by-cpu`: float32 where the CPU lacks bf16 instructions, chosen once
per study, with the KV choices and the workload's space cut following the element size.

The CPU's flags are given as /proc/cpuinfo text, so each case runs on any machine; the study
is a real SQLite file and the model config the real prepared SmolLM2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.server.capabilities import VllmCapabilities
from tuner.server.cpu import cpu_dtype
from tuner.settings import LaunchCommand
from tuner.study.preflight.dtype import resolve_dtype
from tuner.study.preflight.plan import StudyPlan, plan_study
from tuner.study.search.driver import open_study
from tuner.study.search.options import OptimizeOptions
from tuner.study.space import Preset, load_preset
from tuner.testing import cpu_dtype_args

ZEN3 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\nprocessor\t: 1\nflags\t\t: fpu\n"
ZEN4 = "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni avx512_bf16\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx512f amx_tile amx_bf16 amx_int8\n"
# What the plan's preflight is told the installed vLLM accepts (no vLLM is asked here).
CAPS = VllmCapabilities(
    version="0.26.0",
    python=sys.executable,
    spec_fields=frozenset({"method", "num_speculative_tokens", "prompt_lookup_min",
                           "prompt_lookup_max"}),
    methods=frozenset({"ngram"}),
    flags=None,
)  # fmt: skip
LAUNCH = LaunchCommand(("vllm", "serve"))


def test_float32_without_bf16_instructions_and_the_model_s_own_with_them() -> None:
    assert cpu_dtype(ZEN3) == "float32"
    assert cpu_dtype("") == "float32"  # no flags known: the dtype that is fast everywhere
    assert cpu_dtype(ZEN4) is None and cpu_dtype(SAPPHIRE_RAPIDS) is None
    # Only the first processor's flags are read.
    assert cpu_dtype("flags\t: avx2\nflags\t: avx512_bf16\n") == "float32"
    assert cpu_dtype_args(ZEN3) == ("--dtype", "float32") and cpu_dtype_args(ZEN4) == ()


def test_on_a_zen3_the_cpu_preset_runs_float32_with_doubled_kv_choices() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    assert preset.model.dtype == "by-cpu"
    resolved, line = resolve_dtype(preset, cpuinfo=ZEN3)
    assert resolved.model.dtype == "float32"
    assert resolved.space.kv_cache_memory_bytes == (600_000_000, 2_000_000_000, 4_000_000_000)
    assert resolved.baseline.kv_cache_memory_bytes == 4_000_000_000
    assert line is not None and line.startswith("dtype: float32")
    assert "neither amx_bf16 nor avx512_bf16" in line and "--dtype float32" in line
    # The baseline's server, as launched and as exported.
    spec = resolved.server_spec(resolved.baseline_params(), model_path="/m")
    argv = spec.argv(LAUNCH, 8000)
    assert argv[argv.index("--dtype") + 1] == "float32"
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "4000000000"
    assert "--dtype float32" in spec.serve_command()


@pytest.mark.parametrize("cpuinfo", [ZEN4, SAPPHIRE_RAPIDS])
def test_with_bf16_instructions_the_preset_is_the_model_s_own(cpuinfo: str) -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    resolved, line = resolve_dtype(preset, cpuinfo=cpuinfo)
    assert resolved.model.dtype == "auto"
    assert resolved.space == preset.space and resolved.baseline == preset.baseline
    assert line is not None and line.startswith("dtype: the model's own (bf16)")
    spec = resolved.server_spec(resolved.baseline_params(), model_path="/m")
    assert "--dtype" not in spec.argv(LAUNCH, 8000)


def test_gpu_presets_and_named_dtypes_are_left_alone() -> None:
    gpu = load_preset(model="smollm2-135m", gpu="h200")
    assert resolve_dtype(gpu, cpuinfo=ZEN3) == (gpu, None)
    cpu = load_preset(model="smollm2-135m", gpu="cpu")
    named = cpu.model_copy(update={"model": cpu.model.model_copy(update={"dtype": "bfloat16"})})
    assert resolve_dtype(named, cpuinfo=ZEN3) == (named, None)
    argv = named.server_spec(named.baseline_params(), model_path="/m").argv(LAUNCH, 8000)
    assert argv[argv.index("--dtype") + 1] == "bfloat16"


def test_by_cpu_on_a_gpu_preset_is_refused_in_one_line() -> None:
    data = load_preset(model="smollm2-135m", gpu="h200").model_dump()
    data["model"]["dtype"] = "by-cpu"
    with pytest.raises(ValueError, match="for CPU presets"):
        Preset.model_validate(data)


def _plan(url: str, cache: Path, cpuinfo: str, said: list[str]) -> StudyPlan:
    return plan_study(
        load_preset(model="smollm2-135m", gpu="cpu"),
        storage_url=url,
        study_name="s",
        cache_dir=cache,
        model_path=lambda _p: str(cache / "model"),
        say=said.append,
        capabilities=CAPS,
        cpuinfo=cpuinfo,
    )


def test_the_study_plan_sizes_the_kv_cut_at_float32_and_a_study_keeps_its_dtype(
    sqlite_url: str, smollm2_path: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    (cache / "model").parent.mkdir(parents=True)
    (cache / "model").symlink_to(smollm2_path)
    said: list[str] = []
    plan = _plan(sqlite_url, cache, ZEN3, said)
    assert plan.preset.model.dtype == "float32"
    # 2 agents x 3,072 tokens x 46,080 bytes (fp32: 2 x 30 layers x 3 heads x 64 x 4) = 283 MB:
    # 600 MB is the smallest doubled choice that holds it, 4 GB the baseline's.
    assert plan.preset.space.kv_cache_memory_bytes == (600_000_000, 4_000_000_000)
    assert any("46080 bytes/token" in x and "283 MB" in x for x in plan.reductions)
    assert [x for x in said if x.startswith("dtype: ")] == [plan.lines[0]]
    assert plan.lines[0].startswith("dtype: float32")
    # The study stores the float32 preset; the same CPU class resumes it.
    open_study(
        plan.preset, OptimizeOptions(storage_url=sqlite_url, cache_dir=cache, study_name="s")
    )
    assert _plan(sqlite_url, cache, ZEN3, []).preset == plan.preset
    # A box with bf16 instructions would run it in bf16: refused, in one line, with what to do.
    with pytest.raises(ConfigError, match=r"dtype float32.*resume it on a CPU like its own"):
        _plan(sqlite_url, cache, ZEN4, [])
