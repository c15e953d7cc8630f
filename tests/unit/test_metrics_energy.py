"""GPU energy behind the EnergyMeter interface: NVML through a named fake, and "not measured"."""

from __future__ import annotations

import pytest

from tuner.metrics import (
    EnergyMeter,
    FakeNvml,
    NoEnergyMeter,
    NvmlEnergyMeter,
    energy_meter_for,
)


def test_nvml_meter_sums_millijoules_over_the_servers_gpus() -> None:
    nvml = FakeNvml([1500, 2500, 9999])
    meter = NvmlEnergyMeter([0, 1], nvml)
    meter.start()
    assert meter.stop() == pytest.approx(4.0)  # (1500 + 2500) mJ between the two reads
    assert nvml.reads == 4  # GPU 2 is not the server's and is never read
    assert meter.stop() is None  # a window is closed once


def test_stop_before_start_is_not_measured() -> None:
    assert NvmlEnergyMeter([0], FakeNvml([10])).stop() is None


def test_energy_meter_for_falls_back_to_not_measured() -> None:
    assert isinstance(energy_meter_for([0], FakeNvml([10], fail_init=True)), NoEnergyMeter)
    assert isinstance(energy_meter_for([3], FakeNvml([10])), NoEnergyMeter)  # no such GPU
    assert isinstance(energy_meter_for([], FakeNvml([10])), NoEnergyMeter)
    chosen = energy_meter_for([0], FakeNvml([10]))
    assert isinstance(chosen, NvmlEnergyMeter)


def test_no_energy_meter_says_none_never_zero() -> None:
    meter = NoEnergyMeter()
    meter.start()
    assert meter.stop() is None
    assert isinstance(meter, EnergyMeter)
    assert isinstance(NvmlEnergyMeter([0], FakeNvml([1])), EnergyMeter)


def test_gpu_memory_is_summed_over_the_servers_gpus() -> None:
    nvml = FakeNvml([1, 1, 1])
    nvml.used_mib = [1000.0, 2500.5, 7.0]
    assert NvmlEnergyMeter([0, 1], nvml).memory_used_mib() == 3500.5
    assert NoEnergyMeter().memory_used_mib() is None  # not measured, never zero
