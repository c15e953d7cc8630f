"""Two `tuner optimize` drivers on one Postgres study, confirmation on: the stage runs once.

Each driver is a real process with its own local Ray; both search the study's shared budget and
then both reach the confirmation stage. Each (config, round) confirmation run must exist once
for the study (not once per driver), the sequential stage must stop on the study's rounds, and
what each driver prints at the end (the stop line, the verdict table) must be the same, and
the same as one read of the storage afterwards. Trials start the fake vLLM
(`tuner.testing.fake_vllm`, a named fake): two real CPU servers at once do not fit this machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml
from optuna.trial import TrialState

from tests.integration.conftest import fake_preset
from tests.integration.test_ray_cluster import _fake_servers
from tuner.attrs import Role, StudyAttr, TrialAttr
from tuner.results import load_results
from tuner.results.decision import judge_study

# Out of CI since 2026-12-07: CI's minutes on a Zen 3 (docs/ci.md).
pytestmark = [pytest.mark.ray, pytest.mark.postgres, pytest.mark.extended]

N_TRIALS = 3  # the baseline and two candidates
CONFIRM = "2,3"  # both candidates and the baseline; first look after 2 rounds, at most 3


def _study_exists(url: str) -> bool:
    """Plain SQL: creating Optuna's tables from here would race the driver."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            return (
                conn.execute(
                    sqlalchemy.text("SELECT 1 FROM studies WHERE study_name = 'shared'")
                ).first()
                is not None
            )
    except sqlalchemy.exc.SQLAlchemyError:
        return False
    finally:
        engine.dispose()


def _table_rows(out: str) -> dict[str, list[str]]:
    """The confirmation table's rows a driver printed, by trial ("#N": its cells); a cell
    wrapped over several lines is joined again."""
    rows: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and re.fullmatch(r"#\d+", cells[0]):
            last = rows[cells[0]] = cells[1:]
        elif cells and cells[0] == "" and last is not None and len(cells) == len(last) + 1:
            for i, more in enumerate(cells[1:]):
                if more:
                    last[i] = f"{last[i]} {more}"
        else:
            last = None
    return rows


def _stop_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("confirmation: stopped")]


def test_two_drivers_confirm_once_and_agree(postgres_url: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    preset = fake_preset(
        {
            "FAKE_VLLM_STARTUP_S": "0.5",
            "FAKE_VLLM_TOKEN_DELAY_S": "0.01",
            "FAKE_VLLM_SPEC_SPEEDUP": "3",
            "TUNER_TEST_TAG": tag,
        },
        tasks=4,
        tool_latency_s=0.02,
        gpu={"name": "cpu", "cpu": True},
        space={"methods": ["none", "ngram"], "max_num_seqs": [4, 8]},
        baseline=None,
        throughput_streams=[],
    )
    space = tmp_path / "fake.yaml"
    space.write_text(yaml.safe_dump(preset))
    env = {
        **os.environ,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "TUNER_CACHE_DIR": str(tmp_path / "cache"),
        "COLUMNS": "250",  # the verdict table on one line a row, for comparing
    }
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage",
        postgres_url, "--study", "shared", "--n-trials", str(N_TRIALS), "--confirm", CONFIRM,
        "--no-calibrate",
    ]  # fmt: skip

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    first = start()
    # The second starts as soon as the first has created the study (tuner's tables are
    # migrated by whoever comes first; concurrent first-time migrations are not the subject).
    deadline = time.monotonic() + 120
    while not _study_exists(postgres_url):
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "the first driver never created the study"
        time.sleep(0.3)
    drivers = [first, start()]
    outputs = [d.communicate(timeout=300)[0] for d in drivers]
    keep = os.environ.get("TUNER_TEST_KEEP_OUTPUT")  # docs/guide.md quotes a run's output
    if keep:
        for i, out in enumerate(outputs):
            Path(keep, f"driver{i + 1}.txt").write_text(out)
    assert [d.returncode for d in drivers] == [0, 0], outputs

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials()
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    confirms = [t for t in trials if t.user_attrs.get(TrialAttr.ROLE) == Role.CONFIRM]
    runs = Counter(
        (t.user_attrs[TrialAttr.CONFIRM_OF], t.user_attrs[TrialAttr.CONFIRM_ROUND])
        for t in confirms
        if t.user_attrs.get(TrialAttr.FAILURE_KIND) != "interrupted"
    )
    # Each (config, round) once for the study: not once per driver.
    assert runs and max(runs.values()) == 1, runs
    assert all(t.state == TrialState.COMPLETE for t in confirms), [
        (t.number, t.state, t.user_attrs.get(TrialAttr.FAILURE_REASON)) for t in confirms
    ]
    # The sequential stage stopped on the study's rounds: every config confirmed has runs of
    # exactly the rounds the stop names (the baseline's round 0 is also its floor start).
    stop = study.user_attrs[StudyAttr.CONFIRM_STOP]
    configs = {c for c, _ in runs}
    # K = 2: the baseline and every candidate that finished its search run (two at most; one
    # may have been stopped early by screening, which then is not a finalist).
    finished = {
        t.number
        for t in trials
        if t.user_attrs.get(TrialAttr.ROLE) in (Role.BASELINE, Role.CANDIDATE)
        and t.state == TrialState.COMPLETE
    }
    assert 2 <= len(finished) <= 3 and configs == finished, (runs, finished)
    assert set(runs) == {(c, r) for c in configs for r in range(stop["rounds"])}, (stop, runs)
    # Both drivers ran confirmation runs: the stage's work was shared, not repeated.
    pids = Counter(t.user_attrs[TrialAttr.DRIVER]["pid"] for t in confirms)
    assert set(pids) <= {d.pid for d in drivers}

    # What each driver printed at the end is the same, whichever finished last ...
    stops = [_stop_lines(out) for out in outputs]
    assert stops[0] and stops[0][-1] == stops[1][-1], stops
    assert stops[0][-1] == f"confirmation: stopped after {stop['rounds']} rounds: {stop['reason']}"
    tables = [_table_rows(out) for out in outputs]
    assert tables[0] and tables[0] == tables[1], tables
    # ... and what one read of the storage gives now.
    fresh = judge_study(load_results(postgres_url, "shared"))
    for number, cells in tables[0].items():
        v = fresh[int(number[1:])]
        # cells: config, search tasks/h, confirmed tasks/h, paired, outputs
        assert v.confirmed_tph is not None
        assert abs(float(cells[2].replace(",", "")) - v.confirmed_tph) <= 1, (number, cells)
        assert cells[3] == (v.paired.describe() if v.paired else "not paired"), cells
        assert v.confirmed_runs == stop["rounds"]
    exported = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "export", "--storage", postgres_url, "--study",
         "shared", "--format", "json"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert stop["reason"] in exported
    assert _fake_servers(tag) == []
