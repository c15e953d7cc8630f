"""Check tuner's NVML energy meter for real on a GPU machine (no vLLM needed).

Runs bf16 matrix products for a few seconds, then idles, and prints what
`tuner.metrics.energy.energy_meter_for` measured over each window, as joules and mean watts.
A working meter reads clearly more than zero under load, and less per second while idle.

    python benchmarks/nvml_energy_check.py [--load-s 5] [--idle-s 2] [--gpu 0]

The module is loaded by path so that the check needs only PyTorch and nvidia-ml-py.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ENERGY = Path(__file__).resolve().parents[1] / "tuner" / "metrics" / "energy.py"


def _energy_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("tuner_energy", ENERGY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-s", type=float, default=5.0)
    parser.add_argument("--idle-s", type=float, default=2.0)
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args()

    import torch

    energy = _energy_module()
    meter = energy.energy_meter_for([args.gpu])
    print(f"meter: {type(meter).__name__}")
    if isinstance(meter, energy.NoEnergyMeter):
        print("NVML is not available here: energy is 'not measured'")
        return 1
    device = torch.device(f"cuda:{args.gpu}")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize(device)

    meter.start()
    t0 = time.monotonic()
    flops = 0
    while time.monotonic() - t0 < args.load_s:
        for _ in range(20):
            a @ b
        flops += 20 * 2 * 8192**3
        torch.cuda.synchronize(device)
    load_s = time.monotonic() - t0
    load_j = meter.stop()

    meter.start()
    time.sleep(args.idle_s)
    idle_j = meter.stop()

    print(f"load: {load_j:.1f} J over {load_s:.2f} s = {load_j / load_s:.0f} W "
          f"({flops / load_s / 1e12:.0f} TFLOP/s bf16)")  # fmt: skip
    print(f"idle: {idle_j:.1f} J over {args.idle_s:.2f} s = {idle_j / args.idle_s:.0f} W")
    print(f"ratio load/idle power: {(load_j / load_s) / (idle_j / args.idle_s):.2f}")
    print(f"GPU memory in use with the operands allocated: {meter.memory_used_mib():,.0f} MiB")
    return 0 if load_j > 0 and idle_j is not None else 1


if __name__ == "__main__":
    sys.exit(main())
