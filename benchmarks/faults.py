"""Faults injected and survived, log checks passed, bad inputs answered: counted from pytest.

Runs `tests/faults/` file by file with the tally plugin (tests/faults/tally.py), which records
each test's outcome from pytest's own reports: a test that fails or errors anywhere (setup,
body, teardown, or a file that does not collect) counts every fault it injects as not
survived, a skipped test counts as skipped, never as survived. Injected faults and checks that
parse stored vLLM logs are two separate numbers. Prints one line:

    injected faults: 18 tried (8 tests), 17 survived, 1 not survived (failed 1, errors 0),
    0 skipped; log checks: 9 passed of 9; bad inputs: 120 answered cleanly of 120; 6 files,
    1 failing, 1423 s

and writes the whole tally (every test's outcome, the figures the checks measured) to
benchmarks/data/faults.json (`--fast`: benchmarks/data/faults-fast.json), the file the README
quotes.

`--fast` runs only the checks without real servers (bad input, root causes on real logs).
`--lock FILE` holds `flock FILE` around each file that starts vLLM (a shared machine).

    python benchmarks/faults.py [--fast] [--lock /tmp/tuner-heavy.lock] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faults.tally import ENV, read, summarize  # noqa: E402

FAST = ("test_bad_input.py", "test_root_cause.py")
SLOW = ("test_driver_kill.py", "test_server_faults.py", "test_stack_faults.py")
DATA = ROOT / "benchmarks" / "data"


def run_files(
    paths: list[Path], outcomes: Path, *, lock: str | None = None, cwd: Path = ROOT
) -> dict[str, dict[str, Any]]:
    """Run pytest on each file with the tally plugin; per file: its exit code and seconds."""
    files: dict[str, dict[str, Any]] = {}
    for path in paths:
        # -m "": every test of the file, the `faults` ones that plain `pytest` leaves out too.
        argv = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "-p", "tests.faults.tally", "-m", "", str(path),
        ]  # fmt: skip
        if lock and path.name in SLOW:
            argv = ["flock", lock, *argv]
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
        }
    return files


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
    names = list(FAST) if args.fast else [*FAST, *SLOW]
    out = args.out or DATA / ("faults-fast.json" if args.fast else "faults.json")
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = Path(tmp) / "outcomes.jsonl"
        outcomes.touch()
        files = run_files([ROOT / "tests" / "faults" / n for n in names], outcomes, lock=args.lock)
        rows = read(outcomes)
    wall = time.monotonic() - began
    counts = summarize(rows)
    summary = line(counts, files, wall)
    print(summary)
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
    sys.exit(1 if any(v["exit_code"] != 0 for v in files.values()) else 0)


if __name__ == "__main__":
    main()
