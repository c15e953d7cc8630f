"""A storage that fails mid-command is one line on stderr, exit 2; a full disk under a SQLite
file says which file, how much space is left and what to do (issue 48).

A real SQLite file and a real SQLAlchemy error: the write fails on the file's own page limit
(`PRAGMA max_page_count`, SQLite's "database or disk is full" with the disk not full); the disk
itself is full only in the fault suite (tests/faults/test_stack_faults.py, a real 8 MB tmpfs),
so here the free space the CLI reads is set for the one case that needs it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy import create_engine, text

from tuner.cli import _app
from tuner.cli._checks import storage_url


def _app_writing_past_the_page_limit() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def write(storage: str) -> None:
        url = storage_url(storage)
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x TEXT)"))
        with engine.begin() as conn:
            conn.execute(text("PRAGMA max_page_count = 3"))
            conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": "y" * 100_000})

    @app.command()
    def other() -> None:  # two commands: typer then takes the command's name
        pass

    return app


def _fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    db = tmp_path / "study.db"
    code = _app.run(_app_writing_past_the_page_limit(), ["write", f"sqlite:///{db}"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.strip()]


def test_sqlites_own_full_on_a_disk_with_room_is_said_as_sqlite_says_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _fail(tmp_path, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: the storage failed: database or disk is full; "), lines
    assert "run the same command to resume" in lines[0]


def test_a_full_disk_under_the_sqlite_file_names_the_file_the_space_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.disk_usage

    def usage(path: Any) -> Any:
        # The disk holding the study's file has 4 kB left; every other disk is as it is.
        got = real(path)
        return got._replace(free=4096) if Path(path) == tmp_path else got

    monkeypatch.setattr(shutil, "disk_usage", usage)
    code, lines = _fail(tmp_path, capsys)
    assert code == 2 and len(lines) == 1, lines
    line = " ".join(lines[0].split())
    assert line.startswith(
        f"error: the storage failed: the disk under the SQLite file {tmp_path / 'study.db'} "
        "is full (4,096 bytes free; SQLite said: database or disk is full)"
    ), line
    assert "free space on that disk" in line and "run the same command to resume" in line
