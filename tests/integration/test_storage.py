"""Storage contract: one test class run against a SQLite file and the real Postgres server."""

from __future__ import annotations

import optuna
import pytest
from sqlalchemy import inspect

from tuner.records import (
    ServerStartRecord,
    StartupFacts,
    StepRecord,
    TaskRecord,
    ThroughputRecord,
    WorkloadRecord,
)
from tuner.storage import Store, TrialMeasurements, current, head, open_engine, upgrade

pytestmark = pytest.mark.postgres

FACTS = StartupFacts(
    kv_cache_tokens=86_784,
    max_concurrency=10.59,
    num_gpu_blocks=678,
    block_size=128,
    model_load_gib=0.25,
    model_load_seconds=0.67,
    available_kv_gib=1.86,
    graph_capture_gib=None,
    graph_capture_seconds=None,
    engine_init_seconds=51.2,
    startup_seconds=74.5,
    vllm_version="0.32.0",
)


def _start(attempt: int = 0, failure: str | None = None) -> ServerStartRecord:
    return ServerStartRecord(
        argv=("vllm", "serve", "/m", "--max-num-seqs", "512"),
        env={"VLLM_CPU_KVCACHE_SPACE": "2"},
        log_path=f"/tmp/log-{attempt}.txt",
        attempt=attempt,
        started_at=1_764_400_000.5,
        ended_at=1_764_400_075.25,
        exit_status=1 if failure else None,
        failure_kind=failure,
        failure_message="max_num_seqs (512) exceeds available Mamba cache blocks (501)"
        if failure
        else None,
        failure_excerpt="ValueError: max_num_seqs (512) ..." if failure else None,
        failure_details={"requested": 512, "available": 501} if failure else {},
        facts=StartupFacts() if failure else FACTS,
    )


def _workload(successes: int = 2) -> WorkloadRecord:
    steps = (
        StepRecord(0, 900, 0, 24, 0.12, 0.9, "first"),
        StepRecord(1, 1100, 896, 24, 0.05, 0.7, "all"),
        StepRecord(2, 1300, 1024, 24, None, 0.8, "one_block_short"),
    )
    tasks = tuple(
        TaskRecord(
            index=i,
            task_id=f"ledger-{i}",
            template="ledger",
            seed=i,
            warmup=i == 0,
            success=i < successes + 1,
            failure_reason=None if i < successes + 1 else "deadline",
            started_s=1.5 * i,
            wall_s=2.4,
            steps=steps,
        )
        for i in range(3)
    )
    return WorkloadRecord(
        mode="replay",
        task_set_hash="abc123",
        seed=7,
        agents=2,
        tasks=2,
        successes=successes,
        scored_wall_s=60.0,
        tasks_per_hour=120.0,
        tasks_per_hour_low=80.5,
        tasks_per_hour_high=160.25,
        success_rate=1.0,
        success_rate_low=0.34,
        success_rate_high=1.0,
        prefix_cache_hit_ratio=0.81,
        spec_drafts=40,
        spec_draft_tokens=120,
        spec_accepted_tokens=66,
        spec_accepted_per_pos=(30, 22, 14),
        preemptions=3,
        prompt_tokens=6600,
        generation_tokens=144,
        energy_joules=None,
        ttft_p50=0.1,
        ttft_p90=0.2,
        ttft_p99=0.3,
        tpot_p50=0.02,
        output_tokens_per_s=2.4,
        gpu_memory_used_mib=20_480.5,
        task_records=tasks,
    )


class TestStoreContract:
    """Every table written and read back, on each backend."""

    def test_migrations_create_our_tables_with_own_version_table(self, storage_url: str) -> None:
        assert current(storage_url) is None
        upgrade(storage_url)
        assert current(storage_url) == head()
        engine = open_engine(storage_url)
        tables = set(inspect(engine).get_table_names())
        engine.dispose()
        assert {
            "tuner_server_starts",
            "tuner_workload_runs",
            "tuner_task_results",
            "tuner_steps",
            "tuner_throughput_runs",
            "tuner_alembic_version",
        } <= tables
        assert "alembic_version" not in tables  # Optuna's version table is Optuna's alone

    def test_every_table_round_trips(self, storage_url: str) -> None:
        store = Store(storage_url)
        m = TrialMeasurements(
            server_starts=(_start(0, "mamba_blocks_exceeded"), _start(1)),
            workload=_workload(),
            throughput=(ThroughputRecord(1, 4, 512, 12.8), ThroughputRecord(8, 16, 2048, 20.0)),
        )
        store.save_trial("s", 3, m)
        starts = store.server_starts("s", 3)
        assert [s.record for s in starts] == list(m.server_starts)
        runs = store.workload_runs("s", 3, with_tasks=True)
        assert len(runs) == 1
        assert runs[0].record == m.workload
        assert runs[0].server_start_id == starts[-1].id
        assert runs[0].record.task_records[1].steps[2].reuse_class == "one_block_short"
        assert runs[0].record.acceptance_rate == pytest.approx(66 / 120)
        tp = store.throughput_runs("s", 3)
        assert [t.record for t in tp] == list(m.throughput)
        assert tp[1].record.output_tokens_per_s == pytest.approx(102.4)
        assert store.trial_numbers("s") == [3]
        store.close()

    def test_saving_a_trial_again_replaces_it(self, storage_url: str) -> None:
        store = Store(storage_url)
        store.save_trial("s", 1, TrialMeasurements((_start(),), _workload(2)))
        store.save_trial("s", 1, TrialMeasurements((_start(),), _workload(1)))
        store.save_trial("s", 2, TrialMeasurements((_start(),), _workload(2)))
        assert len(store.server_starts("s", 1)) == 1
        runs = store.workload_runs("s", 1, with_tasks=True)
        assert [r.record.successes for r in runs] == [1]
        assert len(runs[0].record.task_records) == 3
        assert len(store.workload_runs("s")) == 2
        store.delete_study("s")
        assert store.workload_runs("s") == []
        assert store.server_starts("s") == []
        store.close()

    @pytest.mark.parametrize("optuna_first", [True, False])
    def test_coexists_with_an_optuna_study(self, storage_url: str, optuna_first: bool) -> None:
        def make_study() -> None:
            study = optuna.create_study(
                storage=storage_url,
                study_name="co",
                direction="maximize",
            )
            study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)

        store = Store(storage_url)
        if optuna_first:
            make_study()
            store.save_trial("co", 0, TrialMeasurements((_start(),), _workload()))
        else:
            store.save_trial("co", 0, TrialMeasurements((_start(),), _workload()))
            make_study()
        loaded = optuna.load_study(study_name="co", storage=storage_url)
        assert len(loaded.trials) == 2
        assert store.workload_runs("co")[0].record.tasks_per_hour == 120.0
        assert current(storage_url) == head()
        store.close()

    def test_store_pickles_without_its_engine(self, storage_url: str) -> None:
        import pickle

        store = Store(storage_url)
        store.save_trial("p", 0, TrialMeasurements((_start(),)))
        clone = pickle.loads(pickle.dumps(store))  # noqa: S301 - our own object, round-tripped
        assert clone._engine is None
        assert len(clone.server_starts("p")) == 1
        store.close()
        clone.close()
