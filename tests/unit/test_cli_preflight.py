"""A bad storage fails in one line within 2 s, before Ray or a model is touched, writing nothing.

Before the checks in tuner/cli/_checks.py, `tuner optimize --storage sqlite:////nonexistent-dir/
x/y.db` started a local Ray and hung past 120 s (the directory was created, as root), and
`--storage notaurl` printed its line after five lines of Ray's start-up noise. These run the real
CLI in a fresh interpreter, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.cli._checks import cache_dir, sqlite_path, storage_url, writable_dir
from tuner.errors import ConfigError, StorageError

LIMIT_S = 2.0


def _tuner(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "COLUMNS": "200", "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TUNER_STORAGE", None)
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    return proc, time.monotonic() - began


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("storage", "words"),
    [
        ("sqlite:////nonexistent-dir/x/y.db", "the directory /nonexistent-dir/x of SQLite storage"),
        ("notaurl", "storage URL 'notaurl' is not a database URL"),
        ("sqlite:///{tmp}/missing/y.db", "does not exist; create it or choose another --storage"),
        ("postgresql://bob:hunter2@127.0.0.1:1/x", "cannot open storage postgresql://bob:***@"),
    ],
)
def test_optimize_with_a_bad_storage_answers_in_one_line_within_2_s(
    tmp_path: Path, storage: str, words: str
) -> None:
    storage = storage.format(tmp=tmp_path)
    before = _tree(tmp_path)
    proc, elapsed = _tuner(
        tmp_path, "optimize", "--model", "smollm2-135m", "--gpu", "cpu", "--storage", storage
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert words in lines[0], lines[0]
    assert proc.stdout.strip() == "", proc.stdout
    assert "ray" not in (proc.stdout + proc.stderr).lower()  # no Ray start-up line
    assert "hunter2" not in proc.stdout + proc.stderr
    assert elapsed < LIMIT_S, f"{elapsed:.2f} s"
    assert _tree(tmp_path) == before  # nothing written: no database, no cache, no Ray dir
    assert not Path("/nonexistent-dir").exists()


@pytest.mark.parametrize("command", ["export", "report", "dashboard"])
def test_reading_commands_never_create_a_database(tmp_path: Path, command: str) -> None:
    proc, elapsed = _tuner(tmp_path, command, "--storage", f"sqlite:///{tmp_path / 'typo.db'}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no database at" in proc.stderr and "run `tuner optimize` first" in proc.stderr
    assert elapsed < LIMIT_S, f"{elapsed:.2f} s"
    assert _tree(tmp_path) == []


def test_db_current_on_a_missing_file_says_none_without_creating_it(tmp_path: Path) -> None:
    proc, _ = _tuner(tmp_path, "db", "current", "--storage", f"sqlite:///{tmp_path / 'a.db'}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("none")
    assert _tree(tmp_path) == []


# In-process: what each check accepts and refuses (the CLI prints these lines as they are).


def test_sqlite_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    good = f"sqlite:///{tmp_path / 'new.db'}"
    assert storage_url(good) == good  # a new file in an existing directory: fine to write
    with pytest.raises(StorageError, match=r"no database at .*new\.db"):
        storage_url(good, must_exist=True)
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StorageError, match="is a directory"):
        storage_url(f"sqlite:///{tmp_path / 'dir.db'}")
    (tmp_path / "text.db").write_text("id,name\n")
    with pytest.raises(StorageError, match=r"is not a SQLite database \(it starts with b'id,name"):
        storage_url(f"sqlite:///{tmp_path / 'text.db'}", must_exist=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(StorageError, match=r"file of SQLite storage .* is not a directory"):
        storage_url(f"sqlite:///{tmp_path / 'file' / 'x.db'}")
    with pytest.raises(StorageError, match="names no SQLite file"):
        storage_url("sqlite:///:memory:")
    with pytest.raises(StorageError, match="is a mysql database"):
        storage_url("mysql://u@127.0.0.1/x")
    assert sqlite_path(good) == tmp_path / "new.db"
    assert sqlite_path("postgresql://u@h/x") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.db", "file", "text.db"]


def test_the_default_storage_may_create_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "fresh-home"))
    url = storage_url(None)
    assert url.startswith(f"sqlite:///{tmp_path / 'fresh-home'}")
    # ... but a user's typo in the same place is refused
    with pytest.raises(StorageError, match="does not exist"):
        storage_url(url)


@pytest.mark.postgres
def test_postgres_is_reached_with_a_short_timeout(postgres_url: str) -> None:
    assert storage_url(postgres_url) == postgres_url
    began = time.monotonic()
    with pytest.raises(StorageError) as err:
        storage_url("postgresql://bob:hunter2@127.0.0.1:1/x")
    assert time.monotonic() - began < LIMIT_S
    assert "hunter2" not in str(err.value) and "bob:***@" in str(err.value)


def test_directories_for_output(tmp_path: Path) -> None:
    assert writable_dir(tmp_path / "a" / "b", "report directory", "--out") == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()  # checked, not created
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="f is not a directory; choose another --out"):
        writable_dir(tmp_path / "f" / "sub", "report directory", "--out")
    with pytest.raises(ConfigError, match="choose another --cache-dir"):
        cache_dir(tmp_path / "f")


def test_the_cli_lists_the_export_formats_the_exporter_writes() -> None:
    from tuner.cli.results import FORMATS as LISTED
    from tuner.results.export_render import FORMATS

    assert LISTED == FORMATS
