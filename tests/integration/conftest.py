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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tuner.server import Launcher, ServerSpec
from tuner.server.cpu import cpu_dtype
from tuner.testing import ServerPool

if TYPE_CHECKING:
    from tuner.study import OptimizeOptions


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
    """The plain SmolLM2 server most tests share: no speculation, 1 GB of KV cache.

    Eager (`--enforce-eager`): these tests check what a server reports and does, not its
    speed, and without torch.compile a start takes about 37 s instead of 62 s on a Zen 4
    (benchmarks/data/cpu-settings-smollm2-135m-cpu.json; more on slower CPUs). Specs derived
    with `replace` keep it. On a CPU without bf16 instructions it serves in fp32
    (`tuner.server.cpu.cpu_dtype`: about 4x the prefill of bf16 there).
    """
    return ServerSpec(
        model=str(smollm2_path),
        served_model_name="smollm2",
        kv_cache_memory_bytes=1_000_000_000,
        dtype=cpu_dtype(),
        extra_args=("--enforce-eager",),
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


# Short agent tasks that the fake vLLM serves in seconds (a few steps, small turns).
FAKE_SHAPE: dict[str, int] = {
    "shared_prefix_tokens": 300,
    "steps_min": 3,
    "steps_max": 4,
    "max_context_tokens": 2048,
    "tool_output_median_tokens": 20,
    "tool_output_p90_tokens": 40,
    "call_turn_min_tokens": 8,
    "call_turn_max_tokens": 16,
    "plan_turn_min_tokens": 16,
    "plan_turn_max_tokens": 32,
}


def fake_preset(
    server_env: Mapping[str, str],
    *,
    tasks: int,
    tool_latency_s: float,
    warmup_tasks: int = 0,
    hybrid: bool = False,
    **fields: Any,
) -> dict[str, Any]:
    """Preset data (as in a YAML file) for model "fake" on the fake vLLM.

    The workload replays `tasks` short text-protocol tasks (`FAKE_SHAPE`) with 2 agents; the
    search space is no speculation vs n-gram at 8 sequences, with the baseline at 8.
    `server_env` goes to every server (the fake's knobs, e.g. FAKE_VLLM_STARTUP_S). `fields`
    are top-level preset fields (gpu, space, throughput_*, ...) that replace the defaults; a
    field given as None is left out, so the preset's own default applies.
    """
    data: dict[str, Any] = {
        "model": {
            "name": "fake",
            "checkpoint": "fake/model",
            "served_name": "fake",
            "max_model_len": 8192,
            **({"hybrid": True} if hybrid else {}),
            "server_env": dict(server_env),
        },
        "space": {"methods": ["none", "ngram"], "max_num_seqs": [8]},
        "baseline": {"max_num_seqs": 8},
        "workload": {
            "mode": "replay",
            "tasks": tasks,
            "agents": 2,
            "warmup_tasks": warmup_tasks,
            "tool_protocol": "text",
            "tool_latency_s": tool_latency_s,
            "shape": dict(FAKE_SHAPE),
        },
    }
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def fake_options(tmp_path: Path, n_trials: int) -> OptimizeOptions:
    """Options for an in-process study "fake" in a SQLite file under `tmp_path`."""
    from tuner.study import OptimizeOptions  # optuna: only for the tests that run a study

    return OptimizeOptions(
        storage_url=f"sqlite:///{tmp_path / 'study.db'}",
        cache_dir=tmp_path / "cache",
        study_name="fake",
        n_trials=n_trials,
        show_progress=False,
    )
