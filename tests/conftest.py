"""Shared fixtures: the cache of test models, fresh SQLite and Postgres databases.

Real services only: the Postgres server on 127.0.0.1:5432 (a fresh database per test run),
SQLite files in tmp, models built by `tuner models prepare` into a persistent cache so that
repeated runs (and vLLM's compile cache) are fast.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

# vLLM 0.32's CPU build cannot load the AOT-compiled artifacts it saves and recompiles at every
# start (~25 s); without AOT it reuses torch inductor's cache. The CPU presets set the same.
os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
# Both cores for vLLM's CPU worker (it reserves one for the engine process by default): x1.154
# tasks/h on the CPU preset, docs/vllm-facts.md "CPU process settings". The CPU presets set it.
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")

POSTGRES_ADMIN_URL = os.environ.get(
    "TUNER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


# Suites too slow for every CI run: each is left out of a plain `pytest` unless asked for by
# `-m` (any expression naming the marker), by its environment variable, or by
# benchmarks/faults.py (TUNER_FAULTS_OUTCOMES). `kill` costs about 13 min of real servers here,
# `faults` about 45 min (2,684 s on a loaded 2-core Xeon, 2026-12-05), `extended` (real-vLLM
# tests beyond CI's core: each checks one part that the core tests do not reach, on servers of
# its own) about 12 min on a Zen 4 and about twice that on a Zen 3; CI stays under its time
# budget on the slowest box without them (docs/ci.md, "What CI runs").
SLOW_SUITES = {
    "faults": ("TUNER_FAULTS", "TUNER_FAULTS_OUTCOMES"),
    "kill": ("TUNER_KILL",),
    "extended": ("TUNER_EXTENDED",),
}


# Modules moved to run right after another, so that the session's shared real server
# (tests/integration/conftest.py `vllm_pool`, which keeps one server while the spec is equal)
# serves both: test_workload_vllm's plain-server tests reuse the server test_models_serve
# started, where the files' own order put a server test between them (one start, about a
# minute, saved).
RUN_AFTER = {"test_workload_vllm.py": "test_models_serve.py"}
# /proc/cpuinfo of a CPU with bf16: a preset resolved on it (`resolve_dtype`) runs at the model's
# own dtype, the recorded grid's figures, whatever CPU runs the test.
BF16_CPU = "flags\t: avx2 avx512f avx512_bf16\n"


def _run_after(items: list[pytest.Item]) -> None:
    """Reorder `items` in place per `RUN_AFTER` (order within each module kept)."""
    for mover, anchor in RUN_AFTER.items():
        moved = [item for item in items if item.path.name == mover]
        rest = [item for item in items if item.path.name != mover]
        anchors = [i for i, item in enumerate(rest) if item.path.name == anchor]
        if moved and anchors:
            end = anchors[-1] + 1
            items[:] = rest[:end] + moved + rest[end:]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the slow suites that nobody asked for; run `RUN_AFTER`'s modules in place."""
    _run_after(items)
    markexpr = config.getoption("markexpr") or ""
    left_out = {
        marker
        for marker, env in SLOW_SUITES.items()
        if marker not in markexpr and not any(os.environ.get(name) for name in env)
    }
    slow = [item for item in items if any(item.get_closest_marker(m) for m in left_out)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item not in slow]


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """Persistent cache for test models and logs (TUNER_TEST_CACHE, else ~/.cache/tuner-test)."""
    path = Path(os.environ.get("TUNER_TEST_CACHE", Path.home() / ".cache" / "tuner-test"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def smollm2_path(cache_dir: Path) -> Path:
    """SmolLM2-135M-Instruct converted for vLLM (built once into the cache)."""
    from tuner.models import prepare

    return prepare("smollm2-135m", cache_dir)


@pytest.fixture(scope="session")
def tiny_hybrid_path(cache_dir: Path) -> Path:
    """The tiny Qwen3-Next-style hybrid config with one MTP layer."""
    from tuner.models import prepare

    return prepare("tiny-hybrid-mtp", cache_dir)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A URL for a new SQLite file."""
    return f"sqlite:///{tmp_path / 'tuner.db'}"


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The admin URL of the real Postgres server; the test run fails loudly if it is down."""
    engine = create_engine(POSTGRES_ADMIN_URL)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        pytest.fail(f"Postgres is not answering at {POSTGRES_ADMIN_URL}: {exc}")
    finally:
        engine.dispose()
    return POSTGRES_ADMIN_URL


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty Postgres database for one test, dropped afterwards."""
    name = f"tuner_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = postgres_server.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :n AND pid <> pg_backend_pid()"
                ),
                {"n": name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def storage_url(request: pytest.FixtureRequest) -> str:
    """The same test against a SQLite file and a fresh Postgres database."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))


def stub_cluster_join(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests of `tuner optimize`'s options that pass --ray-address and stop before the
    study: the command's reachability check, its one join of the cluster and the slot count
    are skipped (the options are what those tests check)."""
    import contextlib

    import tuner.study.pipeline as pipeline

    monkeypatch.setattr(pipeline, "check_ray_address", lambda _address: None)
    monkeypatch.setattr(pipeline, "_one_ray", lambda _address: contextlib.nullcontext())
    monkeypatch.setattr(pipeline, "cluster_slots", lambda *_args: None)
