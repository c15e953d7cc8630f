"""Alembic migrations: up, down and up again, on SQLite and Postgres; and from a built wheel."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from sqlalchemy import inspect

from tuner.storage import current, downgrade, head, open_engine, upgrade

REPO = Path(__file__).resolve().parents[2]


def _tables(url: str) -> set[str]:
    engine = open_engine(url)
    try:
        return {t for t in inspect(engine).get_table_names() if t.startswith("tuner_")}
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_upgrade_downgrade_upgrade(storage_url: str) -> None:
    upgrade(storage_url)
    assert current(storage_url) == head()
    assert "tuner_steps" in _tables(storage_url)
    downgrade(storage_url)
    assert current(storage_url) is None
    assert _tables(storage_url) <= {"tuner_alembic_version"}
    upgrade(storage_url)
    assert current(storage_url) == head()
    assert "tuner_workload_runs" in _tables(storage_url)


def test_a_database_of_the_first_schema_upgrades_and_keeps_its_rows(tmp_path: Path) -> None:
    """tests/assets/tuner-0001.db was written at revision 0001 (before GPU memory existed)."""
    import shutil

    from tuner.storage import Store

    db = tmp_path / "old.db"
    shutil.copy(REPO / "tests" / "assets" / "tuner-0001.db", db)
    url = f"sqlite:///{db}"
    assert current(url) == "0001"
    upgrade(url)
    assert current(url) == head()
    store = Store(url)
    (run,) = store.workload_runs("old-study", 0, with_tasks=True)
    store.close()
    assert run.record.tasks_per_hour == 120.0
    assert len(run.record.task_records) == 3
    assert run.record.gpu_memory_used_mib is None  # not measured then; never invented


def test_wheel_ships_migrations_and_upgrades_a_new_sqlite_file(tmp_path: Path) -> None:
    """Build the wheel, install it into a fresh venv, run `tuner db upgrade` from there.

    The fresh venv gets the dependencies by a plain path entry to this environment's
    site-packages; a path entry does not process `.pth` files, so the editable install of the
    source tree stays invisible and `tuner` is imported from the wheel alone.
    """
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    wheel = next(dist.glob("tuner-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    db = tmp_path / "fresh.db"
    out = subprocess.run(
        [str(venv / "bin" / "tuner"), "db", "upgrade", "--storage", f"sqlite:///{db}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert f"revision {head()}" in out
    where = subprocess.run(
        [str(py), "-c", "import tuner.storage.migrations as m; print(m.script_location())"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert where.endswith("tuner/_alembic") and str(venv) in where
    assert current(f"sqlite:///{db}") == head()


def test_migrations_match_the_models(sqlite_url: str) -> None:
    """No column exists in the ORM models that a migration did not create (and vice versa)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from tuner.storage.schema import Base

    def ours(name: str | None, type_: str, _parent: object) -> bool:
        return type_ != "table" or (
            (name or "").startswith("tuner_") and name != "tuner_alembic_version"
        )

    def diff() -> list[object]:
        engine = open_engine(sqlite_url)
        try:
            with engine.connect() as conn:
                ctx = MigrationContext.configure(conn, opts={"include_name": ours})
                return list(compare_metadata(ctx, Base.metadata))
        finally:
            engine.dispose()

    upgrade(sqlite_url, "0001")
    assert any("gpu_memory_used_mib" in str(d) for d in diff())  # the check can see a gap
    upgrade(sqlite_url)
    assert diff() == []
