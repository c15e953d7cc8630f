"""Bad input gets one clear line and exit code 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def _tuner(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["tuner", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
        timeout=120,
    )


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_unknown_model_name() -> None:
    line = _one_error_line(_tuner("models", "prepare", "gpt-17"))
    assert "gpt-17" in line and "smollm2-135m" in line


def test_unwritable_cache_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    line = _one_error_line(_tuner("models", "prepare", "smollm2-135m", "--cache-dir", str(blocker)))
    assert str(blocker) in line and "TUNER_CACHE_DIR" in line


@pytest.mark.parametrize(
    ("url", "expect"),
    [
        ("postgresql://nohost/x", "nohost"),
        ("notaurl", "not a database URL"),
        ("mysql://u@127.0.0.1:1/x", "driver"),
    ],
)
def test_bad_storage_url(url: str, expect: str) -> None:
    line = _one_error_line(_tuner("db", "current", "--storage", url))
    assert expect in line


def test_password_never_printed() -> None:
    line = _one_error_line(
        _tuner("db", "current", "--storage", "postgresql://bob:s3cret@127.0.0.1:1/x")
    )
    assert "s3cret" not in line and "bob" in line


def test_help_and_db_commands(tmp_path: Path) -> None:
    assert _tuner("--help").returncode == 0
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert "none" in _tuner("db", "current", "--storage", url).stdout
    up = _tuner("db", "upgrade", "--storage", url)
    from tuner.storage import head

    assert up.returncode == 0 and f"revision {head()}" in up.stdout
    assert _tuner("db", "current", "--storage", url).stdout.startswith(head())


def _optimize_with_budget(tmp_path: Path, budget: str) -> subprocess.CompletedProcess[str]:
    db = f"sqlite:///{tmp_path / 'study.db'}"
    return _tuner(
        "optimize", "--model", "smollm2-135m", "--gpu", "cpu", "--storage", db,
        "--cache-dir", str(tmp_path / "cache"), "--budget", budget,
    )  # fmt: skip


@pytest.mark.parametrize("budget", ["20", "1h30", "ten minutes", "0s"])
def test_a_bad_budget_is_one_line_and_writes_nothing(tmp_path: Path, budget: str) -> None:
    line = _one_error_line(_optimize_with_budget(tmp_path, budget))
    assert "--budget" in line and "1h30m" in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_budget_too_small_for_two_runs_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    line = _one_error_line(_optimize_with_budget(tmp_path, "90s"))
    assert line.startswith("error: --budget 90s buys 0 server run"), line
    assert "give at least" in line
    assert not (tmp_path / "study.db").exists()
