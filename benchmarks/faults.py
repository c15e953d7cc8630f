"""Faults injected and survived, log checks passed, bad inputs answered: counted from pytest.

Runs `tests/faults/` file by file with the tally plugin (tests/faults/tally.py), which records
each test's outcome from pytest's own reports: a test that fails or errors anywhere (setup,
body, teardown, or a file that does not collect) counts every fault it injects as not
survived, a skipped test counts as skipped, never as survived. Injected faults and checks that
parse stored vLLM logs are two separate numbers. Prints one line:

    injected faults: 18 tried (8 tests), 17 survived, 1 not survived (failed 1, errors 0),
    0 skipped; log checks: 9 passed of 9; bad inputs: 120 answered cleanly of 120; 6 files,
    1 failing, 1423 s

and writes the whole tally (every test's outcome, the figures the checks measured, each file's
seconds and pytest's FAILED/ERROR lines) to benchmarks/data/faults.json
(`--fast`: benchmarks/data/faults-fast.json), and, unless `--fast`, the README's fault paragraph
from it (`readme_paragraph`; tests/unit/test_fault_tally.py keeps the two equal).

The files that start no server (`FAST`: bad input, root causes on stored logs) run beside the
ones that do (`SLOW`), at nice 19, so they take no time of their own and little from the
servers; the `SLOW` files run one after another (each starts its own servers).

`--fast` runs only the `FAST` files.
`--lock FILE` holds `flock FILE` around each file that starts vLLM (a shared machine).

    python benchmarks/faults.py [--fast] [--lock /tmp/tuner-heavy.lock] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faults.tally import ENV, read, summarize  # noqa: E402

FAST = ("test_bad_input.py", "test_root_cause.py")
SLOW = ("test_driver_kill.py", "test_server_faults.py", "test_stack_faults.py")
DATA = ROOT / "benchmarks" / "data"
README = ROOT / "README.md"
# The line above the README's fault paragraph (its only one naming faults.json); the paragraph
# is everything after it up to a blank line.
README_MARK = "<!-- source: benchmarks/data/faults.json -->"


def run_files(
    paths: list[Path],
    outcomes: Path,
    *,
    lock: str | None = None,
    cwd: Path = ROOT,
    nice: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Run pytest on each file with the tally plugin; per file: its exit code, seconds, last
    line and pytest's FAILED/ERROR lines (what failed, with its message's first line)."""
    files: dict[str, dict[str, Any]] = {}
    for path in paths:
        # -m "": every test of the file, the `faults` ones that plain `pytest` leaves out too.
        argv = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "-p", "tests.faults.tally", "-m", "", str(path),
        ]  # fmt: skip
        if lock and path.name in SLOW:
            argv = ["flock", lock, *argv]
        if nice is not None:
            argv = ["nice", "-n", str(nice), *argv]
        env = {
            **os.environ,
            ENV: str(outcomes),
            "TUNER_FAULTS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        began = time.monotonic()
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
        last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"  {path.name}: {last}", file=sys.stderr)
        files[path.name] = {
            "exit_code": proc.returncode,
            "seconds": round(time.monotonic() - began, 1),
            "pytest": last,
            "failures": failure_lines(proc.stdout),
        }
    return files


def failure_lines(stdout: str) -> list[str]:
    """pytest's short summary lines of tests that failed or errored (`-ra`)."""
    return [ln for ln in stdout.splitlines() if re.match(r"(FAILED|ERROR) ", ln)]


def run_suite(
    fast: list[Path], slow: list[Path], tmp: Path, *, lock: str | None = None, cwd: Path = ROOT
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The `slow` files one after another and, beside them in a thread, the `fast` ones at
    nice 19; each lane appends to an outcomes file of its own. Returns (files, rows)."""
    lanes = {"fast": tmp / "fast.jsonl", "slow": tmp / "slow.jsonl"}
    for path in lanes.values():
        path.touch()
    results: dict[str, dict[str, dict[str, Any]]] = {}

    def fast_lane() -> None:
        results["fast"] = run_files(fast, lanes["fast"], cwd=cwd, nice=19)

    thread = threading.Thread(target=fast_lane)
    thread.start()
    try:
        results["slow"] = run_files(slow, lanes["slow"], lock=lock, cwd=cwd)
    finally:
        thread.join()
    # In the order the files are named (FAST, then SLOW), whichever lane finished first.
    files = {**results.get("fast", {}), **results.get("slow", {})}
    rows = [*read(lanes["fast"]), *read(lanes["slow"])]
    return files, rows


# What each fault test injects, in a few words (the README names the ones not survived); a
# test missing here is named by its function.
FAULT_WORDS = {
    "test_driver_killed_in_every_phase": "the driver SIGKILLed in every phase",
    "test_server_or_engine_killed_mid_workload_fails_its_trial_and_the_study_goes_on": (
        "the API server or engine core SIGKILLed"
    ),
    "test_server_killed_mid_workload_fails_its_trial_and_the_study_goes_on": (
        "the vLLM server SIGKILLed"
    ),
    "test_server_dying_at_its_first_request_is_infeasible_with_vllms_line": (
        "a server dying at its first request"
    ),
    "test_context_too_long_says_why_per_task_in_the_cli_and_the_records": ("a context too short"),
    "test_ray_worker_killed_mid_trial_is_requeued_once": "a killed Ray worker",
    "test_postgres_restarted_mid_study_is_waited_out": "a Postgres restart",
    "test_postgres_restarted_mid_study_and_in_the_confirmation_is_waited_out": (
        "Postgres restarts"
    ),
    "test_driver_sigtermed_in_the_confirmation_exits_130_and_the_rerun_resumes_it": (
        "the driver SIGTERMed in the confirmation"
    ),
    "test_full_disk_under_sqlite_is_one_clear_error_and_the_database_survives": (
        "a full SQLite disk"
    ),
}


def readme_paragraph(tally: dict[str, Any]) -> str:
    """The README's fault paragraph, every figure and miss from `tally` (faults.json)."""
    f, logs, bad = (tally["counts"][k] for k in ("fault", "log_check", "bad_input"))
    faults = [t for t in tally["tests"] if t["kind"] == "fault"]
    missed = [
        FAULT_WORDS.get(name, name)
        for t in faults
        if t["outcome"] in ("failed", "error", "not run")
        for name in [t["nodeid"].split("::", 1)[-1]]
    ]
    if missed:
        survived = f"{f['passed']} survived (not: {'; '.join(missed)})"
    else:
        survived = f"all {f['passed']} survived"
    if f["skipped"]:
        survived += f", {f['skipped']} skipped (not counted as survived)"
    text = (
        "`python benchmarks/faults.py` injects faults into real runs ([which]"
        "(docs/measurements.md#faults-and-bad-input)) and counts pytest's reports "
        f"({tally['finished_utc'][:10]}, {tally['wall_s']} s): {f['tried']} injected faults in "
        f"{f['tests']} tests, {survived}; {logs['passed']} of {logs['tried']} log checks; "
        f"{bad['passed']} of {bad['tried']} bad inputs answered in one line, exit 2."
    )
    return textwrap.fill(text, width=100, break_long_words=False, break_on_hyphens=False)


def write_readme(tally: dict[str, Any], readme: Path = README) -> None:
    """Replace the paragraph under `README_MARK` (and its source line) with the new one."""
    lines = readme.read_text().splitlines()
    at = lines.index(README_MARK)
    end = at + 1
    while end < len(lines) and lines[end].strip():
        end += 1
    lines[at:end] = [README_MARK, *readme_paragraph(tally).splitlines()]
    readme.write_text("\n".join(lines) + "\n")


def line(counts: dict[str, dict[str, int]], files: dict[str, dict[str, Any]], wall: float) -> str:
    """The one-line summary (see the module's docstring)."""
    f, logs, bad = counts["fault"], counts["log_check"], counts["bad_input"]
    failing = sum(1 for v in files.values() if v["exit_code"] != 0)
    not_run = f"; {f['not_run']} not run" if f["not_run"] else ""
    return (
        f"injected faults: {f['tried']} tried ({f['tests']} tests), {f['passed']} survived, "
        f"{f['failed'] + f['error']} not survived (failed {f['failed']}, errors {f['error']}), "
        f"{f['skipped']} skipped{not_run}; "
        f"log checks: {logs['passed']} passed of {logs['tried']}; "
        f"bad inputs: {bad['passed']} answered cleanly of {bad['tried']}; "
        f"{len(files)} files, {failing} failing, {wall:.0f} s"
    )


def _check_files() -> None:
    """Every file named here exists, and every file of tests/faults is named."""
    present = {p.name for p in (ROOT / "tests" / "faults").glob("test_*.py")}
    named = {*FAST, *SLOW}
    if present != named:
        sys.exit(
            f"benchmarks/faults.py: tests/faults has {sorted(present - named)} not named here "
            f"and names {sorted(named - present)} that are missing; update FAST/SLOW"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="skip the checks with real servers")
    parser.add_argument("--lock", default=None, help="flock this file around real-vLLM files")
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON tally")
    args = parser.parse_args()
    _check_files()
    out = args.out or DATA / ("faults-fast.json" if args.fast else "faults.json")
    here = ROOT / "tests" / "faults"
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        files, rows = run_suite(
            [here / n for n in FAST],
            [] if args.fast else [here / n for n in SLOW],
            Path(tmp),
            lock=args.lock,
        )
    wall = time.monotonic() - began
    counts = summarize(rows)
    summary = line(counts, files, wall)
    print(summary)
    for name, file in files.items():
        for failure in file["failures"]:
            print(f"  {name}: {failure}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    tally = {
        "command": "python benchmarks/faults.py" + (" --fast" if args.fast else ""),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": summary,
        "counts": counts,
        "files": files,
        "wall_s": round(wall),
        "measures": {r["name"]: r["value"] for r in rows if r.get("kind") == "measure"},
        "tests": [r for r in rows if "outcome" in r],
    }
    out.write_text(json.dumps(tally, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}", file=sys.stderr)
    if not args.fast and args.out is None:
        write_readme(tally)
        print(f"wrote {README.relative_to(ROOT)}'s fault paragraph", file=sys.stderr)
    sys.exit(1 if any(v["exit_code"] != 0 for v in files.values()) else 0)


if __name__ == "__main__":
    main()
