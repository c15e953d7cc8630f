"""Emulating a smaller card on a bigger one (`gpu.emulate_memory_gib`): the arithmetic, where the
launched fraction comes from, what a trial stores and what the export prints.

Expectations are computed by hand in the comments: (utilization x emulated GiB - extra GiB) /
real GiB, rounded to 4 decimals.
"""

from __future__ import annotations

from typing import Any

import pytest

from tuner.errors import ConfigError
from tuner.results.emulated import for_the_emulated_card
from tuner.results.export import ExportChoice
from tuner.results.export_render import render_export
from tuner.results.rows import TrialRow
from tuner.server.spec import ServerSpec
from tuner.study.space import GpuPart, Preset

H200_AS_24GB = GpuPart(name="h200", memory_gib=140.4, emulate_memory_gib=24, emulate_extra_gib=3.8)


@pytest.mark.parametrize(
    ("utilization", "real"),
    [
        (0.90, 0.1268),  # 0.90 x 24 = 21.6; - 3.8 = 17.8; / 140.4 = 0.12678
        (0.92, 0.1302),  # 22.08 - 3.8 = 18.28; / 140.4 = 0.13020
        (0.85, 0.1182),  # 20.4 - 3.8 = 16.6; / 140.4 = 0.11823
        (0.95, 0.1353),  # 22.8 - 3.8 = 19.0; / 140.4 = 0.13533
    ],
)
def test_the_real_fraction_gives_the_emulated_budget_less_the_missing_memory(
    utilization: float, real: float
) -> None:
    assert H200_AS_24GB.real_utilization(utilization) == real


def test_without_missing_memory_it_is_the_ratio_of_the_cards() -> None:
    gpu = GpuPart(name="big", memory_gib=80, emulate_memory_gib=24)
    assert gpu.real_utilization(0.5) == 0.15  # 0.5 x 24 / 80 = 12 / 80
    assert gpu.real_utilization(1.0) == 0.3  # 24 / 80


def test_without_emulation_the_fraction_is_unchanged() -> None:
    assert GpuPart(name="h200", memory_gib=141).real_utilization(0.9) == 0.9
    assert GpuPart(name="h200").real_utilization(0.9) == 0.9


def test_a_budget_that_does_not_cover_the_missing_memory_is_one_clear_error() -> None:
    gpu = GpuPart(name="h200", memory_gib=140.4, emulate_memory_gib=4, emulate_extra_gib=3.8)
    with pytest.raises(ConfigError, match=r"0\.9 of the emulated 4\.0 GiB card is 3\.60 GiB"):
        gpu.real_utilization(0.9)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"memory_gib": 24, "emulate_memory_gib": 48}, "must not exceed memory_gib"),
        ({"emulate_memory_gib": 24}, "needs a GPU preset with memory_gib"),
        ({"memory_gib": 141, "emulate_extra_gib": 3.8}, "needs emulate_memory_gib"),
        ({"memory_gib": 24, "emulate_memory_gib": 16, "cpu": True}, "needs a GPU preset"),
    ],
)
def test_emulation_settings_that_cannot_hold_are_rejected(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        GpuPart(name="g", **fields)


def _preset_data(**gpu: Any) -> dict[str, Any]:
    return {
        "model": {
            "name": "m",
            "checkpoint": "/models/m",
            "served_name": "m",
            "max_model_len": 4096,
        },
        "gpu": {"name": "h200", "memory_gib": 140.4, **gpu},
        "space": {"methods": ["none"], "gpu_memory_utilization": {"low": 0.85, "high": 0.95}},
        "baseline": {"gpu_memory_utilization": 0.92},
        "workload": {
            "tasks": 8,
            "agents": 2,
            "shape": {"shared_prefix_tokens": 600, "max_context_tokens": 2048},
        },
    }


def test_a_preset_whose_lowest_utilization_does_not_cover_the_extra_is_rejected() -> None:
    # 0.85 x 4 = 3.4 GiB <= 3.8 GiB missing
    with pytest.raises(ValueError, match=r"does not cover gpu\.emulate_extra_gib"):
        Preset.model_validate(_preset_data(emulate_memory_gib=4, emulate_extra_gib=3.8))


def test_the_server_gets_the_real_fraction_and_the_trial_record_keeps_both() -> None:
    preset = Preset.model_validate(_preset_data(emulate_memory_gib=24, emulate_extra_gib=3.8))
    params = {"method": "none", "gpu_memory_utilization": 0.90, "max_num_seqs": 16}
    spec = preset.server_spec(params, model_path="/models/m")
    assert spec.gpu_memory_utilization == 0.1268
    assert "--gpu-memory-utilization 0.1268" in spec.serve_command()
    assert preset.emulation_record(params) == {
        "emulated_memory_gib": 24,
        "real_memory_gib": 140.4,
        "extra_gib": 3.8,
        "gpu_memory_utilization_emulated": 0.90,
        "gpu_memory_utilization_real": 0.1268,
    }
    # The baseline is trial 0 of the same search: its 0.92 is of the emulated card too.
    base = preset.server_spec(preset.baseline_params(), model_path="/models/m")
    assert base.gpu_memory_utilization == 0.1302


def test_a_preset_without_emulation_launches_what_it_searched() -> None:
    preset = Preset.model_validate(_preset_data())
    params = {"method": "none", "gpu_memory_utilization": 0.9, "max_num_seqs": 16}
    assert preset.server_spec(params, model_path="/m").gpu_memory_utilization == 0.9
    assert preset.emulation_record(params) is None


def _row(searched: float, launched: float) -> TrialRow:
    spec = ServerSpec(model="/models/m", gpu_memory_utilization=launched, max_num_seqs=16)
    return TrialRow(
        number=0,
        state="complete",
        role="baseline",
        params={"method": "none", "gpu_memory_utilization": searched, "max_num_seqs": 16},
        value=1000.0,
        serve_command=spec.serve_command(),
    )


def test_the_export_prints_the_emulated_cards_fraction_and_says_so() -> None:
    choice = ExportChoice(
        trial=(row := _row(0.90, 0.1268)), best=row, baseline=row, reason="r", study_name="s"
    )
    text = render_export(choice, "shell")
    assert "--gpu-memory-utilization 0.90" in text
    assert "0.1268" in text.split("vllm serve")[0]  # only in the note above the command
    assert "# --gpu-memory-utilization 0.90 is of the emulated card" in text


def test_without_emulation_the_export_keeps_the_launched_fraction() -> None:
    row = _row(0.92, 0.92)
    argv, note = for_the_emulated_card(
        row, ["vllm", "serve", "m", "--gpu-memory-utilization", "0.92"]
    )
    assert argv[-1] == "0.92"
    assert note is None
    argv, note = for_the_emulated_card(_row(0.875, 0.1234), ["--gpu-memory-utilization", "0.1234"])
    assert argv == ["--gpu-memory-utilization", "0.875"]
    assert note is not None and "ran 0.1234" in note
