"""`tuner optimize --ray-address` on a real two-node Ray cluster, and a node lost mid-trial.

The cluster is started the way an operator starts one (`ray start --head`, then `ray start
--address` with its own `tuner_cpu_slot`; tests/integration/ray_cluster.py). Trials start the
fake vLLM (`tuner.testing.fake_vllm`, a named fake): two real CPU servers do not fit 2 cores.
The study is stored in a fresh Postgres database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from optuna.trial import TrialState

from tests.integration.conftest import fake_preset
from tests.integration.ray_cluster import RayCluster, can_unshare
from tuner.attrs import TrialAttr
from tuner.study.search.roles import counts_toward_budget

pytestmark = [
    pytest.mark.extended,  # out of CI since 2026-12-07: CI's minutes on a Zen 3 (docs/ci.md)
    pytest.mark.ray,
    pytest.mark.postgres,
    pytest.mark.skipif(not can_unshare(), reason="needs a PID namespace (unshare) for `ray stop`"),
]

SPACE = {
    "methods": ["none", "ngram"],
    "max_num_seqs": [4, 8],
    "kv_cache_memory_bytes": [300000000, 2000000000],
}


def _preset(tmp_path: Path, tag: str, *, tasks: int, token_delay_s: float) -> Path:
    data = fake_preset(
        # The tag marks every fake server of this test, so leftovers are found by it.
        {"FAKE_VLLM_STARTUP_S": "2.0", "FAKE_VLLM_TOKEN_DELAY_S": str(token_delay_s),
         "TUNER_TEST_TAG": tag},
        tasks=tasks,
        tool_latency_s=0.05,
        gpu={"name": "cpu", "cpu": True, "count": 2},  # two slots: one per node
        space=SPACE,
        baseline=None,
        throughput_streams=[1],
        throughput_requests=2,
        throughput_output_tokens=8,
    )  # fmt: skip
    path = tmp_path / "fake.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _fake_servers(tag: str) -> list[psutil.Process]:
    """Live fake vLLM servers (and their supervisors) started by this test."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get("TUNER_TEST_TAG") == tag:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RayCluster]:
    env = {**os.environ, "TUNER_VLLM_COMMAND": f"{sys.executable} -m tuner.testing.fake_vllm"}
    c = RayCluster(env)
    try:
        c.start()
        yield c
    finally:
        c.close()


def _optimize(
    cluster: RayCluster, space: Path, url: str, tmp_path: Path, n_trials: int
) -> subprocess.Popen[str]:
    argv = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--storage", url,
        "--study", "cluster", "--n-trials", str(n_trials), "--confirm", "0",
        "--ray-address", cluster.address, "--slots", "2",
    ]  # fmt: skip
    env = {**cluster.env, "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


_INSPECT = """
import json, ray
ray.init(address=ADDRESS, log_to_driver=False, logging_level="ERROR")
from ray._private.state import actors
alive = [a for a in actors().values() if a["State"] != "DEAD"]
print(json.dumps({"alive_actors": len(alive), "total": ray.cluster_resources(),
                  "free": ray.available_resources(),
                  "nodes": [n["NodeID"] for n in ray.nodes() if n["Alive"]]}))
"""


def _inspect(cluster: RayCluster) -> dict[str, object]:
    """What the cluster holds, asked by a fresh driver (this process's Ray config is fixed)."""
    code = _INSPECT.replace("ADDRESS", repr(cluster.address))
    out = subprocess.run(
        [sys.executable, "-c", code], env=cluster.env, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_trials_run_on_both_nodes_and_leave_nothing(
    cluster: RayCluster, postgres_url: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex
    space = _preset(tmp_path, tag, tasks=4, token_delay_s=0.02)
    driver = _optimize(cluster, space, postgres_url, tmp_path, n_trials=4)
    out = driver.communicate(timeout=400)[0]
    assert driver.returncode == 0, out

    study = optuna.load_study(study_name="cluster", storage=postgres_url)
    trials = study.get_trials()
    measured = [t for t in trials if counts_toward_budget(t)]
    assert len(measured) == 4, [(t.number, t.state, t.user_attrs) for t in trials]
    nodes = {t.user_attrs.get(TrialAttr.RAY_NODE) for t in trials if t.state != TrialState.FAIL}
    state = _inspect(cluster)
    # Every trial names its node; both nodes of the cluster ran trials.
    assert nodes == set(state["nodes"]), (nodes, state)  # type: ignore[arg-type]
    # Nothing left on either node: no actor alive, every resource free, no server running.
    assert state["alive_actors"] == 0, state
    assert state["free"] == state["total"], state
    assert _fake_servers(tag) == []
    done = cluster.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    time.sleep(1)
    assert cluster.processes() == [], cluster.processes()


def _node2_holds_a_trial(cluster: RayCluster, tag: str) -> bool:
    """A fake server of this test whose launching worker is a process of the second node."""
    for server in _fake_servers(tag):
        try:
            for parent in server.parents():
                if os.getpgid(parent.pid) == cluster.node2_pgid:
                    return True
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return False


def test_a_node_lost_mid_trial_is_requeued_and_finished_elsewhere(
    cluster: RayCluster, postgres_url: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex
    # Slower trials (about 30 s a run): the second node is killed while it holds one. Two
    # trials: the first on either node, the second on the other.
    space = _preset(tmp_path, tag, tasks=4, token_delay_s=0.06)
    driver = _optimize(cluster, space, postgres_url, tmp_path, n_trials=2)
    deadline = time.monotonic() + 180
    while not _node2_holds_a_trial(cluster, tag):
        assert driver.poll() is None, driver.communicate()[0]
        assert time.monotonic() < deadline, "the second node never ran a trial"
        time.sleep(0.2)
    time.sleep(3)  # well inside the trial: its server is up, its workload runs
    lost = _inspect(cluster)["nodes"]
    cluster.kill_node2()
    out = driver.communicate(timeout=400)[0]
    assert driver.returncode == 0, out

    study = optuna.load_study(study_name="cluster", storage=postgres_url)
    trials = study.get_trials()
    interrupted = [t for t in trials if t.user_attrs.get(TrialAttr.FAILURE_KIND) == "interrupted"]
    assert len(interrupted) == 1, [(t.number, t.state, t.user_attrs) for t in trials]
    gone = interrupted[0]
    assert gone.state == TrialState.FAIL
    assert "was lost while it ran this trial" in gone.user_attrs[TrialAttr.FAILURE_REASON]
    assert gone.user_attrs[TrialAttr.RAY_NODE] in lost  # type: ignore[operator]
    # Re-queued and finished on the remaining node; the study reached its target.
    again = [t for t in trials if t.user_attrs.get(TrialAttr.REQUEUED_FROM) == gone.number]
    assert len(again) == 1 and again[0].state == TrialState.COMPLETE, again
    assert again[0].params == gone.params
    remaining = _inspect(cluster)["nodes"]
    assert again[0].user_attrs[TrialAttr.RAY_NODE] in remaining  # type: ignore[operator]
    assert gone.user_attrs[TrialAttr.RAY_NODE] not in remaining  # type: ignore[operator]
    assert sum(1 for t in trials if counts_toward_budget(t)) == 2
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert _fake_servers(tag) == []
