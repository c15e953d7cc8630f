"""benchmarks/suffix_ab.py: the interleaving, the intervals over runs, the table, bad input.

The A/B itself starts real vLLM servers (six fresh starts); these check what it computes,
prints and refuses without starting one.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import suffix_ab

ROOT = Path(__file__).resolve().parents[2]


def test_rounds_alternate_so_every_config_sits_at_the_same_mean_position() -> None:
    runs = suffix_ab.order(2)
    assert [name for _, name in runs] == ["C", "B", "A", "A", "B", "C"]
    assert [rnd for rnd, _ in runs] == [0, 0, 0, 1, 1, 1]
    # A linear drift adds the same to every config's mean, so it cancels from each ratio.
    positions = {k: [i for i, (_, x) in enumerate(runs) if x == k] for k in "ABC"}
    assert len({sum(p) for p in positions.values()}) == 1
    # The configs differ in their speculative method only.
    keys = {k: {n: v for n, v in c.items() if n.startswith(("kv_", "max_"))} for k, c in
            suffix_ab.CONFIGS.items()}  # fmt: skip
    assert keys["A"] == keys["B"] == keys["C"]
    assert (
        suffix_ab.CONFIGS["B"]["num_speculative_tokens"]
        == suffix_ab.CONFIGS["C"]["num_speculative_tokens"]
    )


def test_the_interval_is_a_t_interval_over_runs() -> None:
    est = suffix_ab.mean_interval([0.70, 0.80])
    assert est is not None and est["mean"] == pytest.approx(0.75) and est["n"] == 2
    # Two runs: t(0.975, 1 df) = 12.706, sd 0.0707, half-width 12.706 x 0.0707 / sqrt 2.
    assert est["high"] - est["mean"] == pytest.approx(12.706 * 0.05, rel=1e-3)
    assert suffix_ab.mean_interval([]) is None
    one = suffix_ab.mean_interval([0.5])
    assert one is not None and math.isnan(one["low"])


def test_the_table_has_one_row_a_config_with_its_ratio_and_acceptance() -> None:
    record = {
        "summary": {
            "A": {
                "tasks_per_hour": [1000.0, 1100.0],
                "ratio_to_none": None,
                "acceptance_rate": None,
                "mean_acceptance_length": None,
            },
            "C": {
                "tasks_per_hour": [900.0, 990.0],
                "ratio_to_none": {"ratio": 0.9, "low": 0.8, "high": 1.01},
                "acceptance_rate": {"mean": 0.79, "low": 0.7, "high": 0.88, "n": 2},
                "mean_acceptance_length": {"mean": 3.1, "low": 2.9, "high": 3.3, "n": 2},
            },
        }
    }
    lines = suffix_ab.table(record).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| no speculation | 1,000, 1,100 | 1 | - | - |")
    assert lines[3] == (
        "| suffix | 900, 990 | x0.900 [0.800, 1.010] | 0.790 [0.700, 0.880] | 3.10 [2.90, 3.30] |"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rounds", "1"], "--rounds must be at least 2"),
        (["--gpu", "h200"], "acceptance on dummy weights means nothing"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.suffix_ab", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_a_traces_file_is_replayed_whole_with_its_first_conversation_as_warm_up() -> None:
    # The committed SWE-agent traces (13 conversations): the CPU preset warms up on 1, so the
    # A/B scores the other 12, each once, and the workload reads the file itself.
    from benchmarks.record_grid import PLANS
    from tuner.workload.phases import build_jobs

    path = ROOT / "benchmarks" / "data" / "traces" / "swe-agent-demos.jsonl"
    read = suffix_ab.read_traces(str(path))
    assert not isinstance(read, str), read
    described, conversations = read
    assert conversations == 13 and described["source"] == "traces"
    preset = suffix_ab.with_workload(PLANS["large"].preset(), str(path), conversations)
    assert preset.workload.traces == str(path.resolve()) and preset.workload.tasks == 12
    warm, scored, _ = build_jobs(preset.workload)
    assert (len(warm), len(scored)) == (1, 12)
    # Without a file the preset is the generated suite, unchanged.
    plain = PLANS["large"].preset()
    assert suffix_ab.with_workload(plain, None, 0) is plain
