"""A server runs at the driver's niceness, not at the niceness of the Ray worker that starts it.

Ray starts its workers at niceness 15, and the server inherits it from the worker's launcher; a
study's driver records its own niceness (TUNER_DRIVER_NICE) before it starts a local Ray, and
the supervisor puts the server back there (tuner/server/supervisor.py). Run on the fake vLLM
server in a child process made as nice as a Ray worker. Lowering niceness needs CAP_SYS_NICE:
the test runs where that is held (root, as here and in CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import os, sys
from pathlib import Path
os.nice(15 - os.nice(0))  # as nice as a Ray worker
from tuner.server import Launcher, ServerSpec
from tuner.settings import LaunchCommand
root = Path(sys.argv[1])
fake = LaunchCommand((sys.executable, "-m", "tuner.testing.fake_vllm"))
launcher = Launcher(log_dir=root / "logs", state_dir=root / "run", launch_command=fake)
with launcher.launch(ServerSpec(model="fake-model"), timeout_s=30) as handle:
    group = [p for p in os.listdir("/proc") if p.isdigit()]
    nices = []
    for p in group:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == handle.pid:  # the process group of the server
            nices.append(int(fields[16]))
    print("worker", os.nice(0), "server", sorted(set(nices)))
"""


def _run(tmp_path: Path, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering niceness needs CAP_SYS_NICE")
def test_the_server_runs_at_the_drivers_niceness(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TUNER_DRIVER_NICE"}
    env["TUNER_CACHE_DIR"] = str(tmp_path / "cache")
    assert _run(tmp_path / "a", {**env, "TUNER_DRIVER_NICE": "0"}) == "worker 15 server [0]"
    # Without a driver's record (a server started outside a study) nothing changes.
    assert _run(tmp_path / "b", env) == "worker 15 server [15]"
