"""GPU energy over the scored window, behind one small interface with a no-GPU implementation.

`NvmlEnergyMeter` reads `nvmlDeviceGetTotalEnergyConsumption` (millijoules since the driver
loaded) at start and stop and sums the growth over the server's GPUs, idle time between
requests included (docs/vllm-facts.md, NVML). `NoEnergyMeter` says "not measured" (None), never
zero. `FakeNvml` is a named stand-in for the pynvml functions the meter calls, for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, Protocol, runtime_checkable

__all__ = ["EnergyMeter", "FakeNvml", "NoEnergyMeter", "NvmlEnergyMeter", "energy_meter_for"]


@runtime_checkable
class EnergyMeter(Protocol):
    """Measures energy between `start()` and `stop()`."""

    def start(self) -> None:
        """Begin the window."""

    def stop(self) -> float | None:
        """End the window; joules used, or None when not measured."""

    def memory_used_mib(self) -> float | None:
        """GPU memory in use now (MiB, summed over the GPUs), or None when not measured."""


class NoEnergyMeter:
    """The meter for machines without NVML: energy is not measured."""

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> float | None:
        """Always None ("not measured")."""
        return None

    def memory_used_mib(self) -> float | None:
        """Always None ("not measured")."""
        return None


class NvmlEnergyMeter:
    """Total energy of some GPUs through NVML, in joules.

    Args:
        gpu_indices: NVML indices of the server's GPUs.
        nvml: The pynvml module (or a stand-in such as `FakeNvml`); imported when None.

    Raises:
        Exception: Whatever pynvml raises when NVML or a GPU is unavailable
            (`energy_meter_for` turns that into `NoEnergyMeter`).
    """

    def __init__(self, gpu_indices: Sequence[int], nvml: Any = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self._nvml = nvml
        nvml.nvmlInit()
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in gpu_indices]
        self._start: list[int] | None = None

    def _read(self) -> list[int]:
        return [int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles]

    def start(self) -> None:
        """Read every GPU's energy counter."""
        self._start = self._read()

    def stop(self) -> float | None:
        """Joules used by the GPUs since `start()`, summed; None if never started or unreadable."""
        if self._start is None:
            return None
        try:
            end = self._read()
        except Exception:  # a GPU that fell off the bus: not measured, not zero
            return None
        millijoules = sum(e - s for s, e in zip(self._start, end, strict=True))
        self._start = None
        return millijoules / 1000.0

    def memory_used_mib(self) -> float | None:
        """Memory in use on the GPUs now (vLLM holds its KV cache for the server's life)."""
        try:
            used = sum(int(self._nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self._handles)
        except Exception:  # unreadable now: not measured, not zero
            return None
        return used / 2**20


def energy_meter_for(gpu_indices: Sequence[int], nvml: Any = None) -> EnergyMeter:
    """NVML's meter for `gpu_indices` when NVML initialises, else `NoEnergyMeter`."""
    if not gpu_indices:
        return NoEnergyMeter()
    try:
        return NvmlEnergyMeter(gpu_indices, nvml)
    except Exception:  # no driver, no library, no such GPU: energy is simply not measured
        return NoEnergyMeter()


class FakeNvml:
    """A stand-in for the pynvml functions `NvmlEnergyMeter` calls.

    Each GPU's energy counter starts at `start_mj` and grows by `step_mj[i]` millijoules per
    read. With `fail_init` set, `nvmlInit` raises like a machine without a driver.
    """

    class NVMLError(Exception):
        """What pynvml raises."""

    def __init__(
        self, step_mj: Sequence[int], *, start_mj: int = 1_000_000, fail_init: bool = False
    ) -> None:
        self.step_mj = list(step_mj)
        self.used_mib = [1024.0 * (i + 1) for i in range(len(step_mj))]
        self.energy_mj = [start_mj] * len(step_mj)
        self.fail_init = fail_init
        self.reads = 0

    def nvmlInit(self) -> None:
        """Initialise, or fail like a machine without an NVIDIA driver."""
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        """The handle of GPU `index` (its index)."""
        if not 0 <= index < len(self.step_mj):
            raise self.NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        """Memory of GPU `handle`: `used_mib[handle]` MiB in use (as bytes, like NVML)."""
        return SimpleNamespace(used=int(self.used_mib[handle] * 2**20))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        """Millijoules since the driver loaded; grows by the GPU's step at every read."""
        self.reads += 1
        self.energy_mj[handle] += self.step_mj[handle]
        return self.energy_mj[handle]
