"""`tuner optimize` with its output going to a file: one plain line per event, and an ETA.

A real `tuner optimize` process (its own local Ray, a SQLite file) whose trials start the fake
vLLM (`tuner.testing.fake_vllm`, a named fake: the point is the driver's output, and a real CPU
server takes minutes a trial). Its stdout and stderr go to a file, as under nohup or CI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna_dashboard._note import get_note_from_system_attrs

from tests.integration.conftest import fake_preset

pytestmark = pytest.mark.ray

PRESET = fake_preset(
    {"FAKE_VLLM_STARTUP_S": "1.0", "FAKE_VLLM_TOKEN_DELAY_S": "0.01"},
    tasks=4,
    tool_latency_s=0.0,
    gpu={"name": "cpu", "cpu": True},
    space={"methods": ["none", "ngram"], "max_num_seqs": [4, 8]},
    throughput_streams=[1],
    throughput_requests=2,
    throughput_output_tokens=8,
)


def test_optimize_to_a_file_prints_a_line_per_trial_and_an_eta(tmp_path: Path) -> None:
    space = tmp_path / "fake.yaml"
    space.write_text(yaml.safe_dump(PRESET))
    env = {
        **os.environ,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "TUNER_CACHE_DIR": str(tmp_path / "cache"),
    }
    log = tmp_path / "optimize.log"
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage",
        f"sqlite:///{tmp_path / 'study.db'}", "--n-trials", "2", "--confirm", "1,1",
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600)
    text = log.read_text()
    assert proc.returncode == 0, text
    lines = text.splitlines()
    stamped = [line for line in lines if re.match(r"\[\d+:\d\d:\d\d\] ", line)]
    # The estimate from the preset comes before anything ran, and says it is one.
    assert stamped[0].split("] ", 1)[1].startswith("workload: replay (load shape"), text
    assert stamped[1].split("] ", 1)[1].startswith("estimate: "), text
    assert "4 server runs (2 trials + 2 confirmation runs)" in stamped[1]
    assert "an estimate from the preset" in stamped[1]
    # Every trial: started with its config, server ready with its KV tokens, then its outcome.
    for n in range(4):
        started = [
            i for i, line in enumerate(stamped) if f"] trial {n} " in line and "started: " in line
        ]
        ready = [i for i, line in enumerate(stamped) if f"] trial {n} server ready: " in line]
        done = [
            i
            for i, line in enumerate(stamped)
            if re.search(rf"\] trial {n} .*(scored|pruned|infeasible|failed)", line)
        ]
        assert len(started) == len(ready) == len(done) == 1, (n, text)
        assert started[0] < ready[0] < done[0], text
        assert "KV cache tokens, started in " in stamped[ready[0]]
    assert "trial 0 (baseline) started: none" in text
    # Replay scores are completed tasks/h, with their interval.
    assert re.search(
        r"trial 0 \(baseline\) scored: [\d,]+ completed tasks/h \[[\d,]+, [\d,]+\]", text
    )
    assert "successful tasks/h" not in "\n".join(stamped)
    assert "(confirmation of #0, round 1) started" in text
    assert "confirmation round 1 of 1 done" in text
    # A measured ETA after each run, counting the confirmation runs still to come.
    etas = [line for line in stamped if "] ETA: " in line]
    assert len(etas) == 4, text
    assert "3 server runs to go" in etas[0] and "measured over 1 server run" in etas[0]
    assert "no server run left" in etas[-1]
    # The end of the command writes the answer into the dashboard: the note and the plots.
    assert "dashboard: the recommendation is study fake-cpu's note, with 5 plots" in text
    study = optuna.load_study(study_name="fake-cpu", storage=f"sqlite:///{tmp_path / 'study.db'}")
    attrs = study._storage.get_study_system_attrs(study._study_id)
    body = get_note_from_system_attrs(attrs, None)["body"]
    assert "### What to deploy: trial #" in body and "vllm serve" in body
    assert len(optuna.artifacts.get_all_artifact_meta(study)) == 5
