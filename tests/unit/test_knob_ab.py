"""benchmarks/knob_ab.py: the interleaving, the orientation of its figure, and bad input.

The A/B itself starts real vLLM servers (six fresh starts); these check what it prints and
refuses without starting one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import knob_ab  # noqa: E402


def test_each_round_swaps_which_config_runs_first() -> None:
    assert knob_ab.order(3) == ["A", "B", "B", "A", "A", "B"]
    # Under a steady drift every config runs as often early as late in each pair of rounds.
    positions = {k: [i for i, x in enumerate(knob_ab.order(4)) if x == k] for k in "AB"}
    assert sum(positions["A"]) == sum(positions["B"])


def _record(a: int, b: int, ratio: float, low: float, high: float) -> dict:
    return {
        "knob": "kv_cache_memory_bytes",
        "a_value": a,
        "b_value": b,
        "ratios": [ratio, ratio],
        "paired": {"ratio": ratio, "low": low, "high": high, "p_value": 0.5},
        "machine": {"cores": 2},
        "load_1min": [2.1, 2.4],
        "recorded_at": "2026-12-02T01:00:00+00:00",
    }


def test_the_figure_is_always_the_higher_value_over_the_lower() -> None:
    # B is the smaller cache, 20% slower: read as the larger one x1.25 [1.111, 1.429].
    line = knob_ab.summary_line(_record(2_000_000_000, 300_000_000, 0.8, 0.7, 0.9))
    assert line.startswith("kv_cache_memory_bytes 2000000000 against 300000000, interleaved:")
    assert "x1.250 [1.111, 1.429]" in line and "per round 1.250, 1.250" in line
    same = knob_ab.summary_line(_record(300_000_000, 2_000_000_000, 1.25, 1.111, 1.429))
    assert "x1.250 [1.111, 1.429]" in same


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for argv, says in (
        (["--knob", "max_num_seqs"], "NAME=VALUE"),
        (["--knob", "dtype=float32"], "not a param of A"),
        (["--knob", "max_num_seqs=8", "--rounds", "1"], "at least 2"),
        (["--knob", "max_num_seqs=8", "--config", "{nope"], "knob_ab:"),
    ):
        done = subprocess.run(
            [sys.executable, str(BENCH / "knob_ab.py"), *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert done.stdout == ""
