"""The dtype of the tests' real CPU servers follows the CPU's bf16 instructions."""

from __future__ import annotations

from tuner.testing import cpu_dtype_args

ZEN3 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\nprocessor\t: 1\nflags\t\t: fpu\n"
ZEN4 = "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni avx512_bf16\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx512f amx_tile amx_bf16 amx_int8\n"


def test_fp32_without_bf16_instructions() -> None:
    assert cpu_dtype_args(ZEN3) == ("--dtype", "float32")
    assert cpu_dtype_args("") == ("--dtype", "float32")  # no flags known: the safe speed


def test_the_model_s_bf16_with_avx512_bf16_or_amx() -> None:
    assert cpu_dtype_args(ZEN4) == ()
    assert cpu_dtype_args(SAPPHIRE_RAPIDS) == ()


def test_only_the_first_processor_s_flags_are_read() -> None:
    assert cpu_dtype_args("flags\t: avx2\nflags\t: avx512_bf16\n") == ("--dtype", "float32")
