"""Integration fixtures: real vLLM servers (CPU build), shared so that a run starts few of them.

`vllm_pool.get(spec)` keeps at most one real server alive for the whole session: it returns
the running server when the spec is equal, otherwise it stops that one and starts `spec`.
A test that starts a server of its own calls `vllm_pool.stop()` first. Everything is stopped
at session end. Pid files live in the persistent test cache, so the servers of a test run that
was killed are reaped by the next run's launcher.

Only one vLLM server may run on the machine at a time (other sessions share it): run vLLM
tests under `flock /tmp/tuner-vllm.lock pytest -m vllm ...`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tuner.server import Launcher, ServerSpec
from tuner.testing import ServerPool


@pytest.fixture(scope="session")
def vllm_launcher(cache_dir: Path) -> Launcher:
    """A launcher with logs and pid files in the persistent test cache."""
    return Launcher(log_dir=cache_dir / "logs", state_dir=cache_dir / "run")


@pytest.fixture(scope="session")
def vllm_pool(vllm_launcher: Launcher) -> Iterator[ServerPool]:
    """The session's shared real-server pool (see module docstring)."""
    pool = ServerPool(vllm_launcher, timeout_s=600.0)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="session")
def smollm2_spec(smollm2_path: Path) -> ServerSpec:
    """The plain SmolLM2 server most tests share: no speculation, 1 GB of KV cache."""
    return ServerSpec(
        model=str(smollm2_path),
        served_model_name="smollm2",
        kv_cache_memory_bytes=1_000_000_000,
    )


@contextmanager
def fake_vllm_ray(num_gpus: int) -> Iterator[None]:
    """Local Ray with `num_gpus` fake GPUs whose workers start tuner's fake server as `vllm`."""
    import ray

    saved = os.environ.get("TUNER_VLLM_COMMAND")
    os.environ["TUNER_VLLM_COMMAND"] = f"{sys.executable} -m tuner.testing.fake_vllm"
    ray.init(num_cpus=2, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("TUNER_VLLM_COMMAND", None)
        else:
            os.environ["TUNER_VLLM_COMMAND"] = saved
