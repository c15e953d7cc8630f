"""GPU tests: a real vLLM on a real NVIDIA GPU (marker `gpu`; never part of CI).

Every test here is skipped unless NVML sees a GPU and the vLLM that `TUNER_VLLM_COMMAND` runs
is installed; on the CPU-only CI machine they are all skipped at collection, at no cost. They
were run on an H200 with the offline kit (docs/gpu-validation.md says how, and what they printed).

`TUNER_GPU_OUT` (a directory) keeps what the tests wrote: the study database, the CLI outputs,
the report and the server logs; otherwise a temporary directory is used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).parent


def _gpu_count() -> int:
    try:
        with warnings.catch_warnings():
            # Some pynvml builds warn at import; under pytest's "error" filter that would
            # read as "no GPU" and skip every test.
            warnings.simplefilter("ignore")
            import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library, no driver, no GPU: all mean "no GPU here"
        return 0


def _why_skip() -> str | None:
    if _gpu_count() == 0:
        return "no NVIDIA GPU visible through NVML"
    from tuner.errors import ConfigError
    from tuner.server.capabilities import find_python
    from tuner.settings import get_settings

    try:
        python = find_python(get_settings().launch_command())
    except ConfigError as exc:
        return f"no vLLM to start: {exc.user_line()}"
    if python is None:
        return "TUNER_VLLM_COMMAND does not start vLLM"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if GPU_DIR in Path(str(item.fspath)).parents]
    if not mine:
        return
    reason = _why_skip()
    for item in mine:
        item.add_marker(pytest.mark.gpu)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def gpu_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the GPU tests leave their evidence."""
    configured = os.environ.get("TUNER_GPU_OUT")
    path = Path(configured) if configured else tmp_path_factory.mktemp("gpu-out")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class CliRun:
    """One `tuner` command's exit code and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def run_tuner(out: Path, name: str, *args: str, timeout_s: float, env: dict[str, str]) -> CliRun:
    """Run `python -m tuner.cli ARGS` as a user would; keep its output in `out/NAME.txt`."""
    argv = (sys.executable, "-m", "tuner.cli", *args)
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
    )
    (out / f"{name}.txt").write_text(
        f"$ tuner {' '.join(args)}\n# exit {proc.returncode}\n{proc.stdout}\n"
        f"# stderr\n{proc.stderr}"
    )
    return CliRun(argv, proc.returncode, proc.stdout, proc.stderr)
