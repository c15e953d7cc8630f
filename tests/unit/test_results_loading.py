"""Loading a study back: trials joined with tuner's tables, and choosing the study by name."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.errors import StorageError, StudyError
from tuner.results import ReuseCounts, load_results
from tuner.results.study_reader import describe_config
from tuner.testing.sample import write_sample_study


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('loading') / 'study.db'}"
    write_sample_study(url)
    return url


def test_rows_carry_the_tables_measurements(sample_url: str) -> None:
    results = load_results(sample_url)
    assert results.study_name == "sample"
    assert (results.model, results.gpu) == ("smollm2-135m", "cpu")
    assert [t.number for t in results.trials] == [0, 1, 2, 3, 4, 5]
    base, ngram = results.trials[0], results.trials[1]
    assert results.baseline == base
    assert (base.role, base.method, base.state) == ("baseline", "none", "complete")
    assert (base.tasks_per_hour, base.tasks_per_hour_low, base.tasks_per_hour_high) == (
        752.0,
        730.0,
        770.0,
    )
    assert (base.kv_cache_tokens, base.successes, base.tasks) == (36253, 3, 3)
    assert base.cache_hit_pct == pytest.approx(78.0)
    assert dict(base.tokens_per_s) == {1: pytest.approx(40.0), 8: pytest.approx(4096 / 27.2)}
    assert base.energy_per_success_j is None
    assert ngram.kv_cache_tokens == 27405
    assert ngram.preemptions == 2
    assert ngram.energy_per_success_j == pytest.approx(5000.0 / 2)
    assert ngram.acceptance_by_position == pytest.approx((0.5, 0.3, 0.1))
    assert ngram.acceptance_rate == pytest.approx(180 / 600)
    assert ngram.vllm_version == "0.32.0+cpu"


def test_reuse_counts_skip_first_steps_and_warmup(sample_url: str) -> None:
    # The warm-up task's three "none" steps and every task's "first" step are not counted.
    base, ngram = load_results(sample_url).trials[:2]
    assert base.reuse == ReuseCounts(all=7, one_block_short=0, partial=1, none=1)
    assert ngram.reuse == ReuseCounts(all=3, one_block_short=3, partial=2, none=1)
    assert ngram.reuse is not None
    assert ngram.reuse.fractions()["one_block_short"] == pytest.approx(3 / 9)


def test_infeasible_failed_pruned_and_control_trials(sample_url: str) -> None:
    results = load_results(sample_url)
    deep, crash, pruned, control = results.trials[2:]
    assert deep.infeasible and not deep.feasible and deep.tasks_per_hour is None
    assert (deep.failure_kind, deep.failure_reason) == (
        "no_cache_memory",
        "No available memory for the cache blocks.",
    )
    assert (crash.state, crash.failure_reason) == ("fail", "Engine core died")
    # A pruned trial keeps its partial measurements (here only in its user attributes).
    assert (pruned.state, pruned.tasks_per_hour, pruned.kv_cache_tokens) == ("pruned", 300.0, 19727)
    assert pruned.pruned_at_tasks == 4
    assert control.role == "control" and not control.exportable and control.feasible
    assert control.label == "control for #1: no speculation cut to its KV cache"
    assert [t.number for t in results.measured()] == [0, 1, 4, 5]
    assert [t.number for t in results.not_run()] == [2, 3]


def test_a_study_is_required_when_the_storage_holds_several(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    write_sample_study(url, study_name="alpha")
    write_sample_study(url, study_name="beta")
    with pytest.raises(StudyError, match=r"holds 2 studies; choose one with --study: alpha, beta"):
        load_results(url)
    assert load_results(url, "beta").study_name == "beta"
    with pytest.raises(StudyError, match=r"no study named 'gamma'.*\(studies: alpha, beta\)"):
        load_results(url, "gamma")


def test_an_empty_storage_says_to_run_optimize(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.storages.RDBStorage(url).engine.dispose()
    with pytest.raises(StudyError, match="holds no study yet; run `tuner optimize` first"):
        load_results(url)


def test_a_bad_url_fails_in_one_line_without_the_password() -> None:
    with pytest.raises(StorageError) as info:
        load_results("postgresql://me:secret@127.0.0.1:1/nowhere")
    assert "secret" not in info.value.user_line()
    assert "cannot open storage postgresql://me:***@127.0.0.1:1/nowhere" in info.value.user_line()


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({"method": "none"}, "no speculation"),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "prompt_lookup_min": 2,
                "prompt_lookup_max": 5,
                "max_num_seqs": 8,
            },
            "n-gram depth 3 (lookup 2-5), max seqs 8",
        ),
        (
            {
                "method": "mtp",
                "num_speculative_tokens": 2,
                "disable_eagle_block_drop": True,
                "gpu_memory_utilization": 0.9,
            },
            "MTP depth 2, last block kept, gpu mem 0.90",
        ),
    ],
)
def test_describe_config(params: dict[str, object], text: str) -> None:
    assert describe_config(params) == text
