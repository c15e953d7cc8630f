"""The fault suite's tally counts what pytest reported, on a synthetic run of real pytest.

A tmp directory holds a fault file with a passing test, a failing one, one whose fixture errors,
one whose teardown errors after its body passed, a skipped one and one injecting 3 faults that
fails; a log-check file and a bad-input file beside it. benchmarks/faults.py's own runner runs
them through real pytest with the plugin, and the counts come from its reports.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import faults
from tests.faults.tally import summarize

ROOT = Path(__file__).resolve().parents[2]

FAULTS = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("fixture fails before the fault is injected")

@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("cleanup failed after the body passed")

def test_survived():
    assert True

def test_not_survived():
    assert 1 == 2

def test_errors_in_setup(broken):
    pass

def test_errors_in_teardown(bad_teardown):
    pass

def test_skipped():
    pytest.skip("the fault did not occur")

@pytest.mark.injects(3)
def test_three_kills_one_fails():
    raise AssertionError("the second kill left a server")
"""

ROOT_CAUSE = """
def test_log_parsed():
    assert "CUDA" in "CUDA error"

def test_log_misread():
    assert False
"""

BAD_INPUT = """
import pytest

@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad(n):
    assert n != 2
"""


def test_counts_come_from_pytests_reports(tmp_path: Path) -> None:
    # Laid out as tests/faults is: a directory with a conftest of its own under the rootdir
    # (pytest then builds a hook subset without that conftest for the rootdir's nodes, which
    # needs every registered plugin hashable).
    suite = tmp_path / "faults"
    suite.mkdir()
    (suite / "conftest.py").write_text("def pytest_collection_modifyitems(items):\n    pass\n")
    (suite / "test_server_faults.py").write_text(FAULTS)
    (suite / "test_root_cause.py").write_text(ROOT_CAUSE)
    (suite / "test_bad_input.py").write_text(BAD_INPUT)
    (suite / "test_does_not_import.py").write_text("import no_such_module_here\n")
    # As benchmarks/faults.py runs the suite: the files without servers in a lane of their own
    # beside the others, each lane with its own outcomes file.
    fast = [suite / "test_root_cause.py", suite / "test_bad_input.py"]
    slow = [suite / "test_server_faults.py", suite / "test_does_not_import.py"]
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    files, rows = faults.run_suite(fast, slow, lanes, cwd=tmp_path)
    by_name = {r["nodeid"].rsplit("::", 1)[-1]: r["outcome"] for r in rows}
    assert by_name["test_survived"] == "passed"
    assert by_name["test_not_survived"] == "failed"
    assert by_name["test_errors_in_setup"] == "error"
    assert by_name["test_errors_in_teardown"] == "error"
    assert by_name["test_skipped"] == "skipped"
    assert by_name["test_three_kills_one_fails"] == "failed"

    counts = summarize(rows)
    # 5 tests of one fault each, 3 faults in one test, and a file that did not import (1)
    assert counts["fault"] == {
        "tried": 9, "tests": 7, "passed": 1, "failed": 4, "error": 3, "skipped": 1, "not_run": 0,
    }  # fmt: skip
    assert (counts["log_check"]["tried"], counts["log_check"]["passed"]) == (2, 1)
    assert (counts["bad_input"]["tried"], counts["bad_input"]["passed"]) == (3, 2)
    assert all(files[name]["exit_code"] != 0 for name in files)
    # pytest's own FAILED/ERROR lines are kept, per file, with the message's first line.
    kept = files["test_server_faults.py"]["failures"]
    assert any(ln.startswith("FAILED ") and "test_not_survived" in ln for ln in kept), kept
    assert any(ln.startswith("ERROR ") and "test_errors_in_setup" in ln for ln in kept), kept
    assert files["test_does_not_import.py"]["failures"], files["test_does_not_import.py"]

    summary = faults.line(counts, files, 12.0)
    assert summary.startswith(
        "injected faults: 9 tried (7 tests), 1 survived, 7 not survived (failed 4, errors 3), "
        "1 skipped; log checks: 1 passed of 2; bad inputs: 2 answered cleanly of 3; "
        "4 files, 4 failing, 12 s"
    ), summary


def _paragraph_in(readme: str) -> str:
    lines = readme.splitlines()
    at = lines.index(faults.README_MARK) + 1
    end = at
    while end < len(lines) and lines[end].strip():
        end += 1
    return "\n".join(lines[at:end])


def test_the_readmes_fault_paragraph_is_the_one_faults_json_gives() -> None:
    tally = json.loads((ROOT / "benchmarks" / "data" / "faults.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert _paragraph_in(readme) == faults.readme_paragraph(tally), (
        "README.md's fault paragraph is not what benchmarks/data/faults.json says: run "
        "python benchmarks/faults.py (it rewrites both)"
    )


def test_the_paragraph_names_what_did_not_survive_and_is_rewritten_in_place(
    tmp_path: Path,
) -> None:
    tally = {
        "finished_utc": "2026-12-05T13:00:00Z",
        "wall_s": 1234,
        "counts": {
            "fault": {"tried": 4, "tests": 3, "passed": 3, "failed": 1, "skipped": 0},
            "log_check": {"tried": 2, "passed": 2},
            "bad_input": {"tried": 5, "passed": 5},
        },
        "tests": [
            {"nodeid": "f.py::test_full_disk_under_sqlite_is_one_clear_error_and_the_database_"
             "survives", "kind": "fault", "outcome": "failed"},
            {"nodeid": "f.py::test_new_fault", "kind": "fault", "outcome": "passed"},
            {"nodeid": "g.py::test_log", "kind": "log_check", "outcome": "passed"},
        ],
    }  # fmt: skip
    text = faults.readme_paragraph(tally)
    flat = " ".join(text.split())
    assert "4 injected faults in 3 tests, 3 survived (not: a full SQLite disk);" in flat, flat
    assert "(2026-12-05, 1234 s)" in flat
    assert all(len(line) <= 100 for line in text.splitlines())
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{faults.README_MARK}\nold\nold too\n\n## next\n")
    faults.write_readme(tally, readme)
    assert _paragraph_in(readme.read_text()) == text
    assert readme.read_text().endswith("\n\n## next\n")
    assert readme.read_text().count(faults.README_MARK) == 1
