"""`tuner sweep` against the real vLLM CPU build: one server, several loads, stored, resumable.

One real server start (the baseline of a study written here, 2 tasks per load at 1 and 2
agents): about 50 s on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from tuner.results.load_sweep import SWEEP_ATTR, LoadSweep, load_table_rows
from tuner.storage import Store, normalize_url
from tuner.study.space import load_preset
from tuner.study.stages.load_sweep import SWEEP_TABLE_SUFFIX, SweepOptions, run_sweep
from tuner.testing import ServerPool

# Out of CI's core (tests/conftest.py SLOW_SUITES): `pytest -m extended` runs it.
pytestmark = [pytest.mark.vllm, pytest.mark.extended]


def _study(url: str) -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    study = optuna.create_study(study_name="sw", storage=normalize_url(url), direction="maximize")
    study.set_user_attr("preset", preset.model_dump(mode="json"))
    params = preset.baseline_params()
    dists = {
        "method": CategoricalDistribution(list(preset.space.methods)),
        "kv_cache_memory_bytes": CategoricalDistribution(
            list(preset.space.kv_cache_memory_bytes or ())
        ),
        "max_num_seqs": CategoricalDistribution(list(preset.space.max_num_seqs)),
    }
    study.add_trial(
        create_trial(params=params, distributions=dists, value=1.0, user_attrs={"role": "baseline"})
    )


def test_one_server_serves_every_load_and_the_sweep_resumes(
    sqlite_url: str, cache_dir: Path, vllm_pool: ServerPool
) -> None:
    vllm_pool.stop()  # one real server at a time on this machine
    _study(sqlite_url)
    options = SweepOptions(
        storage_url=sqlite_url, cache_dir=cache_dir, study_name="sw", agents=(1, 2), tasks=2
    )
    sweep = run_sweep(options)
    (base,) = sweep.configs
    assert base.failure is None and base.is_baseline
    assert [p.agents for p in base.points] == [1, 2]
    assert all(p.tasks == 2 and len(p.outcomes) == 2 for p in base.points)
    # Each load played its own task set: nothing a previous load cached is replayed.
    ids = [{tid for tid, _, _ in p.outcomes} for p in base.points]
    assert ids[0].isdisjoint(ids[1])
    assert base.kv_cache_tokens and base.kv_cache_tokens > 0

    stored = optuna.load_study(study_name="sw", storage=normalize_url(sqlite_url)).user_attrs
    assert LoadSweep.from_json(stored[SWEEP_ATTR]) == sweep
    _, rows = load_table_rows(sweep)
    assert rows[0][-1] == "1, 2"  # the baseline is the only config: it wins everywhere

    store = Store(sqlite_url)
    try:
        starts = store.server_starts("sw" + SWEEP_TABLE_SUFFIX, 0)
        runs = store.workload_runs("sw" + SWEEP_TABLE_SUFFIX, 0)
    finally:
        store.close()
    assert len(starts) == 1  # one fresh server for the config, every load on it
    assert sorted(r.record.agents for r in runs) == [1, 2]

    # Run again: the config is complete, so no server starts and nothing changes.
    assert run_sweep(options) == sweep
    store = Store(sqlite_url)
    try:
        assert len(store.server_starts("sw" + SWEEP_TABLE_SUFFIX, 0)) == 1
    finally:
        store.close()
