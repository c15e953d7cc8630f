"""Before anything is written: an unreachable Ray cluster is one line, fast, and no database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.integration.test_study_drivers import PRESET


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


def test_an_unreachable_ray_address_is_one_line_within_seconds_and_writes_nothing(
    tmp_path: Path,
) -> None:
    space = tmp_path / "fake.yaml"
    space.write_text(yaml.safe_dump(PRESET))
    db = tmp_path / "study.db"
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage",
        f"sqlite:///{db}", "--ray-address", f"127.0.0.1:{_closed_port()}",
    ]  # fmt: skip
    env = {**os.environ, "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no Ray cluster answers at 127.0.0.1:" in lines[0], proc.stderr
    assert elapsed < 20
    assert not db.exists()
