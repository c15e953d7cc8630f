"""Faults injected and survived, bad inputs tried and answered cleanly: the suite in one line.

Runs `tests/faults/` file by file (each check appends what it tried to a tally file, see
tests/faults/tally.py) and prints:

    faults: 17 injected, 17 survived; bad inputs: 62 tried, 62 answered cleanly; ...

`--fast` runs only the checks without real servers (bad input, root causes on real logs).
`--lock FILE` holds `flock FILE` around each file that starts vLLM (a shared machine).

    python benchmarks/faults.py [--fast] [--lock /tmp/tuner-heavy.lock]
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

ROOT = Path(__file__).resolve().parent.parent
FAST = ("test_bad_input.py", "test_root_cause.py")
SLOW = ("test_driver_kill.py", "test_server_faults.py", "test_stack_faults.py")


def _run(files: list[str], tally: Path, lock: str | None) -> tuple[int, float]:
    failed, began = 0, time.monotonic()
    for name in files:
        # -m "": every test of the file, the `faults` ones that plain `pytest` leaves out too.
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", ""]
        argv = [*pytest, f"tests/faults/{name}"]
        if lock and name in SLOW:
            argv = ["flock", lock, *argv]
        env = {**os.environ, "TUNER_FAULTS_TALLY": str(tally)}
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"  {name}: {last}", file=sys.stderr)
        failed += proc.returncode != 0
    return failed, time.monotonic() - began


def _check_files() -> None:
    """Every file named here exists, and every file of tests/faults is named: a renamed file
    would otherwise be a pytest usage error counted as one failing file, its faults untold."""
    present = {p.name for p in (ROOT / "tests" / "faults").glob("test_*.py")}
    named = {*FAST, *SLOW}
    if present != named:
        sys.exit(
            f"benchmarks/faults.py: tests/faults has {sorted(present - named)} not named here "
            f"and names {sorted(named - present)} that are missing; update FAST/SLOW"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="skip the checks with real servers")
    parser.add_argument("--lock", default=None, help="flock this file around real-vLLM files")
    args = parser.parse_args()
    _check_files()
    files = list(FAST) if args.fast else [*FAST, *SLOW]
    with tempfile.TemporaryDirectory() as tmp:
        tally = Path(tmp) / "tally.jsonl"
        tally.touch()
        failed_files, wall = _run(files, tally, args.lock)
        rows = [json.loads(line) for line in tally.read_text().splitlines() if line.strip()]
    count = {
        (kind, ok): sum(r["n"] for r in rows if r["kind"] == kind and r["ok"] == ok)
        for kind in ("fault", "bad_input")
        for ok in (True, False)
    }
    faults = count[("fault", True)] + count[("fault", False)]
    bad = count[("bad_input", True)] + count[("bad_input", False)]
    measured = {r["name"]: r["value"] for r in rows if r["kind"] == "measure"}
    extra = "".join(f"; {name} {value}" for name, value in sorted(measured.items()))
    print(
        f"faults: {faults} injected, {count[('fault', True)]} survived; "
        f"bad inputs: {bad} tried, {count[('bad_input', True)]} answered cleanly; "
        f"{len(files)} files, {failed_files} failing, {wall:.0f} s{extra}"
    )
    sys.exit(1 if failed_files else 0)


if __name__ == "__main__":
    main()
