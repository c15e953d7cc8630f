"""The fault suite's tally counts what pytest reported, on a synthetic run of real pytest.

A tmp directory holds a fault file with a passing test, a failing one, one whose fixture errors,
one whose teardown errors after its body passed, a skipped one and one injecting 3 faults that
fails; a log-check file and a bad-input file beside it. benchmarks/faults.py's own runner runs
them through real pytest with the plugin, and the counts come from its reports.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import faults  # noqa: E402 (benchmarks/faults.py)

from tests.faults.tally import read, summarize  # noqa: E402

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
    outcomes = tmp_path / "outcomes.jsonl"
    names = ("test_server_faults.py", "test_root_cause.py", "test_bad_input.py")
    paths = [suite / name for name in (*names, "test_does_not_import.py")]
    files = faults.run_files(paths, outcomes, cwd=tmp_path)
    rows = read(outcomes)
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

    summary = faults.line(counts, files, 12.0)
    assert summary.startswith(
        "injected faults: 9 tried (7 tests), 1 survived, 7 not survived (failed 4, errors 3), "
        "1 skipped; log checks: 1 passed of 2; bad inputs: 2 answered cleanly of 3; "
        "4 files, 4 failing, 12 s"
    ), summary
