"""Two `tuner optimize` drivers on one Postgres study: N trials together, none run twice.

Each driver is a real process with its own local Ray (which also checks that two studies run
side by side on one machine); trials start the fake vLLM (`tuner.testing.fake_vllm`, a named
fake) because two real CPU servers at once would not fit this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml
from optuna.trial import TrialState

from tests.integration.conftest import fake_preset
from tuner.attrs import Role, TrialAttr
from tuner.storage import Store
from tuner.study.search.roles import counts_toward_budget

pytestmark = [pytest.mark.ray, pytest.mark.postgres]

N_TRIALS = 6

PRESET = fake_preset(
    {"FAKE_VLLM_STARTUP_S": "3.0", "FAKE_VLLM_TOKEN_DELAY_S": "0.02"},
    tasks=4,
    tool_latency_s=0.05,
    gpu={"name": "cpu", "cpu": True},
    space={
        "methods": ["none", "ngram"],
        "max_num_seqs": [4, 8],
        "kv_cache_memory_bytes": [300000000, 2000000000],
    },
    baseline=None,
    throughput_streams=[1],
    throughput_requests=2,
    throughput_output_tokens=8,
)


def test_two_drivers_share_one_study(postgres_url: str, tmp_path: Path) -> None:
    space = tmp_path / "fake.yaml"
    space.write_text(yaml.safe_dump(PRESET))
    env = {
        **os.environ,
        "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm",
        "TUNER_CACHE_DIR": str(tmp_path / "cache"),
    }
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage",
        postgres_url, "--study", "shared", "--n-trials", str(N_TRIALS), "--confirm", "0",
    ]  # fmt: skip

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    first = start()
    # The second joins once the first has created the study (tuner's tables are migrated by
    # whoever comes first; concurrent first-time migrations are not this test's subject).
    engine = sqlalchemy.create_engine(postgres_url)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        try:  # plain SQL: creating Optuna's tables from here would race the driver
            with engine.connect() as conn:
                found = conn.execute(
                    sqlalchemy.text("SELECT 1 FROM studies WHERE study_name = 'shared'")
                ).first()
        except sqlalchemy.exc.SQLAlchemyError:
            found = None
        if found:
            break
        time.sleep(0.5)
    engine.dispose()
    drivers = [first, start()]
    outputs = [d.communicate(timeout=600)[0] for d in drivers]
    assert [d.returncode for d in drivers] == [0, 0], outputs

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials()
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    measured = [t for t in trials if counts_toward_budget(t)]
    assert len(measured) == N_TRIALS, [_brief(t) for t in trials]
    # Both drivers ran trials, and no config was measured twice.
    drivers_seen = Counter(t.user_attrs[TrialAttr.DRIVER]["pid"] for t in measured)
    assert len(drivers_seen) == 2, drivers_seen
    keys = Counter(tuple(sorted(t.params.items())) for t in measured)
    assert max(keys.values()) == 1, keys
    store = Store(postgres_url)
    try:
        numbers = store.trial_numbers("shared")
        # Every measured trial is stored; so is the baseline's floor start, which a study runs
        # after its search with --confirm 0 too (the correctness probe's second baseline start).
        roles = {t.number: t.user_attrs.get(TrialAttr.ROLE) for t in trials}
        extra = set(numbers) - {t.number for t in measured}
        assert {t.number for t in measured} <= set(numbers)
        assert all(roles[n] == Role.CONFIRM for n in extra), (extra, roles)
        assert len(extra) <= 1, extra
        assert all(len(store.workload_runs("shared", t.number)) == 1 for t in measured)
    finally:
        store.close()


def _brief(t: optuna.trial.FrozenTrial) -> tuple[object, ...]:
    """One trial in a line a failing assertion can show whole."""
    a = t.user_attrs
    return (
        t.number,
        t.state.name,
        a.get(TrialAttr.ROLE),
        (a.get(TrialAttr.DRIVER) or {}).get("pid"),
        a.get(TrialAttr.FAILURE_KIND),
        a.get(TrialAttr.REQUEUED_FROM),
        a.get(TrialAttr.COPY_OF),
        tuple(sorted(t.params.items())),
    )
