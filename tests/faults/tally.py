"""Counts for the faults summary: each check says what it tried and whether it was handled.

`benchmarks/faults.py` sets `TUNER_FAULTS_TALLY` to a file and runs this suite; every check
appends one JSON line there ({"kind": "fault" | "bad_input", "ok": bool, "n": int}). Without the
variable nothing is written, so a plain `pytest` run is unaffected.
"""

from __future__ import annotations

import json
import os

__all__ = ["measure", "tally"]


def tally(kind: str, ok: bool, n: int = 1) -> None:
    """Record `n` injected faults or bad inputs of `kind`, handled (`ok`) or not."""
    path = os.environ.get("TUNER_FAULTS_TALLY")
    if not path:
        return
    with open(path, "a") as out:
        out.write(json.dumps({"kind": kind, "ok": bool(ok), "n": n}) + "\n")


def measure(name: str, value: object) -> None:
    """Record a measured figure (e.g. seconds until a killed driver's servers were gone)."""
    path = os.environ.get("TUNER_FAULTS_TALLY")
    if not path:
        return
    with open(path, "a") as out:
        out.write(json.dumps({"kind": "measure", "name": name, "value": value}) + "\n")
