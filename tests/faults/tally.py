"""The fault suite's tally, counted from pytest's own reports (a pytest plugin).

`benchmarks/faults.py` runs each file of tests/faults with `-p tests.faults.tally` and
`TUNER_FAULTS_OUTCOMES=FILE`; this plugin then appends one JSON line per collected test to FILE:

    {"nodeid": "...", "file": "test_x.py", "kind": "fault", "n": 1, "outcome": "failed"}

The outcome is pytest's: "passed", "failed" (the test body), "error" (a fixture, setup or
teardown failed, or the file did not collect), "skipped", or "not run" (collected, never
reported: the session stopped early). A test that fails or errors anywhere counts every fault it
injects as not survived; nothing a test writes itself decides the count (an earlier version had
each test append its own line, so a check that failed before its line dropped out of the count).

Kinds, by file: `test_root_cause.py` parses stored vLLM logs ("log_check", nothing is
injected), `test_bad_input.py` feeds bad input to the CLI ("bad_input"), every other file
injects a real fault ("fault"). A test that injects several faults in a row says how many with
`@pytest.mark.injects(N)`; all N count as not survived when it fails.

Without `TUNER_FAULTS_OUTCOMES` nothing is recorded, so a plain `pytest` run is unaffected.
`measure()` records a figure a check measured (e.g. seconds until a killed driver's servers were
gone) beside the outcomes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["KINDS", "Recorder", "kind_of", "measure", "read", "summarize"]

ENV = "TUNER_FAULTS_OUTCOMES"
KINDS = {"test_root_cause.py": "log_check", "test_bad_input.py": "bad_input"}
_WORSE = {"not run": 0, "passed": 1, "skipped": 2, "failed": 3, "error": 4}


def kind_of(file_name: str) -> str:
    """What the tests of a file count as: "fault", "log_check" or "bad_input"."""
    return KINDS.get(Path(file_name).name, "fault")


def _file(nodeid: str) -> str:
    return Path(nodeid.split("::", 1)[0]).name


@dataclass(eq=False)  # hashable: pluggy keeps registered plugins in sets
class Recorder:
    """Collects each test's outcome from pytest's reports and appends them at the end."""

    path: Path
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _row(self, nodeid: str, n: int = 1) -> dict[str, Any]:
        file = _file(nodeid)
        return self.rows.setdefault(
            nodeid,
            {"nodeid": nodeid, "file": file, "kind": kind_of(file), "n": n, "outcome": "not run"},
        )

    def _set(self, row: dict[str, Any], outcome: str) -> None:
        if _WORSE[outcome] > _WORSE[row["outcome"]]:
            row["outcome"] = outcome

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # a file that does not import: its faults are not survived, not absent
            self._set(self._row(report.nodeid or str(report.fspath)), "error")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            marker = item.get_closest_marker("injects")
            self._row(item.nodeid, int(marker.args[0]) if marker else 1)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = self._row(report.nodeid)
        if report.failed:
            self._set(row, "failed" if report.when == "call" else "error")
        elif report.skipped:
            # an expected failure is still a failure of what the test checks
            self._set(row, "failed" if hasattr(report, "wasxfail") else "skipped")
        elif report.when == "call":
            self._set(row, "passed")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        with self.path.open("a") as out:
            for row in self.rows.values():
                out.write(json.dumps(row) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "injects(n): how many faults the test injects (tally)")
    path = os.environ.get(ENV)
    if path:
        config.pluginmanager.register(Recorder(Path(path)), "tuner-faults-recorder")


def read(path: Path) -> list[dict[str, Any]]:
    """The rows a run appended (outcomes and measures)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per kind: faults (or checks) tried, passed, failed, errored, skipped, not run; tests."""
    out: dict[str, dict[str, int]] = {}
    for kind in ("fault", "log_check", "bad_input"):
        mine = [r for r in rows if r.get("kind") == kind and "outcome" in r]
        counts = {"tried": sum(r["n"] for r in mine), "tests": len(mine)}
        for outcome in ("passed", "failed", "error", "skipped", "not run"):
            counts[outcome.replace(" ", "_")] = sum(r["n"] for r in mine if r["outcome"] == outcome)
        out[kind] = counts
    return out


def measure(name: str, value: object) -> None:
    """Record a measured figure (e.g. seconds until a killed driver's servers were gone)."""
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a") as out:
        out.write(json.dumps({"kind": "measure", "name": name, "value": value}) + "\n")
