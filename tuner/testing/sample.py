"""A small study with known numbers, written like `tuner optimize` writes one.

Real Optuna trials (with the attributes of `tuner.attrs`) and real rows in tuner's tables,
so tests of export/report/dashboard read the same storage a real study leaves, and anyone can
try the commands without a GPU: `write_sample_study("sqlite:///sample.db")`.

The trials: #0 baseline (no speculation), #1 n-gram depth 3 (its score is a parameter, to move
it above or below the baseline's interval), #2 an infeasible n-gram depth 5, #3 a crash, #4 a
pruned MTP candidate, #5 a control of #1 (no speculation cut to #1's KV cache). With `confirm`
rounds, #6 onwards are confirmation runs (baseline, n-gram, baseline, n-gram, ...); `probes`
gives the greedy probe answers of the baseline, of n-gram and of a second baseline start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tuner.attrs import ControlKind, Role, StudyAttr, TrialAttr
from tuner.metrics import Score
from tuner.records import (
    ServerStartRecord,
    StartupFacts,
    StepRecord,
    TaskRecord,
    ThroughputRecord,
    WorkloadRecord,
)
from tuner.results.study_reader import open_optuna_storage
from tuner.server.spec import ServerSpec, SpeculativeSpec
from tuner.storage import Store, TrialMeasurements

__all__ = ["SAMPLE_MODEL", "SampleScore", "write_sample_study"]

SAMPLE_MODEL = "/models/SmolLM2 135M"  # a space on purpose: quoting must survive it
_KV_BYTES = 2_000_000_000
# A probe given to `write_sample_study`: token ids per prompt, or a whole stored probe.
ProbeData = list[list[int]] | dict[str, Any]
_DISTRIBUTIONS = {
    "method": CategoricalDistribution(["none", "ngram", "mtp"]),
    "num_speculative_tokens": IntDistribution(1, 5),
    "prompt_lookup_min": IntDistribution(1, 5),
    "prompt_lookup_max": IntDistribution(1, 8),
    "kv_cache_memory_bytes": IntDistribution(500_000_000, 4_000_000_000),
    "max_num_seqs": IntDistribution(1, 16),
}


@dataclass(frozen=True)
class SampleScore:
    """Successful tasks/h with its interval."""

    value: float
    low: float
    high: float


def _tasks(
    classes: list[list[str]], successes: int, seconds: tuple[float, ...] = (10.0, 10.0, 10.0)
) -> tuple[TaskRecord, ...]:
    """One warm-up task (all "none", which must not count) and the scored tasks."""
    warmup = TaskRecord(
        0, "warmup-0", "ledger", 0, True, True, None, 0.0, 5.0, _steps(["none"] * 3)
    )
    scored = tuple(
        TaskRecord(
            i + 1,
            f"task-{i}",
            "ledger",
            i,
            False,
            i < successes,
            None if i < successes else "wrong balance",
            5.0 + i,
            seconds[i],
            _steps(steps),
        )
        for i, steps in enumerate(classes)
    )
    return (warmup, *scored)


def _steps(classes: list[str]) -> tuple[StepRecord, ...]:
    kinds = ["first", *classes]
    return tuple(
        StepRecord(i, 1000 + 200 * i, 800 * i, 80, 0.05, 0.5, kind) for i, kind in enumerate(kinds)
    )


def _workload(
    sample: SampleScore, tasks: tuple[TaskRecord, ...], **diagnostics: Any
) -> WorkloadRecord:
    """The record of a replay run of `tasks` scoring `sample`, built as the runner builds one.

    The sample's interval and success-rate bounds are given, not bootstrapped; no latencies
    were measured; `diagnostics` are the server's counters and energy, by name.
    """
    scored = [t for t in tasks if not t.warmup]
    successes = sum(t.success for t in scored)
    score = Score(
        tasks=len(scored),
        successes=successes,
        scored_wall_s=3600.0 * successes / sample.value,
        tasks_per_hour=sample.value,
        tasks_per_hour_low=sample.low,
        tasks_per_hour_high=sample.high,
        success_rate=successes / len(scored),
        success_rate_low=0.5,
        success_rate_high=1.0,
    )
    return WorkloadRecord.from_score(
        score,
        mode="replay",
        task_set_hash="sample",
        seed=0,
        agents=2,
        task_records=tasks,
        **diagnostics,
    )


def _start(
    spec: ServerSpec, kv_tokens: int | None, failure: str | None = None
) -> ServerStartRecord:
    return ServerStartRecord(
        argv=tuple(spec.serve_command().split()),
        env={},
        log_path="sample-server.log",
        failure_kind=failure,
        facts=StartupFacts(kv_cache_tokens=kv_tokens, vllm_version="0.32.0+cpu"),
    )


def _attrs(role: Role, spec: ServerSpec, **extra: object) -> dict[str, object]:
    return {
        TrialAttr.ROLE: role,
        TrialAttr.SERVER_SPEC: spec.model_dump(mode="json"),
        TrialAttr.SERVE_COMMAND: spec.serve_command(),
        **extra,
    }


def write_sample_study(
    url: str,
    *,
    study_name: str = "sample",
    ngram: SampleScore = SampleScore(648.0, 620.0, 680.0),
    baseline: SampleScore = SampleScore(752.0, 730.0, 770.0),
    ngram_task_s: tuple[float, float, float] = (9.0, 10.0, 11.0),
    confirm: tuple[tuple[float | None, float | None], ...] = (),
    probes: Mapping[str, ProbeData] | None = None,
    mode: str = "replay",
) -> str:
    """Write the sample study into `url` and return its name.

    Args:
        url: Storage URL.
        study_name: The study's name.
        ngram: n-gram's search-time score (it solves all 3 tasks when above the baseline,
            else 2 of 3).
        baseline: The baseline's search-time score.
        ngram_task_s: Seconds of n-gram's 3 scored tasks (the baseline's are 10 each): their
            spread is what the paired comparison's interval sees.
        confirm: Confirmation rounds as (baseline tasks/h, n-gram tasks/h); None: that start
            failed (no answer on /health).
        probes: Greedy probe answers: "baseline", "ngram", "baseline2" (a second start); each
            the answers' token ids, or a whole stored probe (`ProbeResult.to_json()`).
        mode: The workload mode recorded on the study.
    """
    probes = probes or {}
    storage = open_optuna_storage(url)
    study = optuna.create_study(storage=storage, study_name=study_name, direction="maximize")
    study.set_user_attr(StudyAttr.MODEL, "smollm2-135m")
    study.set_user_attr(StudyAttr.GPU, "cpu")
    study.set_user_attr(StudyAttr.MODE, mode)
    # The sample's machine is a quiet one whose noise was measured (the recorded quiet CPU box:
    # 0.0337 of a round's log ratio over 10 df), as a preset's `between_run` would give it.
    study.set_user_attr(
        StudyAttr.BETWEEN_RUN_NOISE,
        {"log_sd": 0.0337, "df": 10, "source": "the sample machine's measured between_run"},
    )
    store = Store(url)

    def add(state: TrialState, params: dict[str, object], value: float | None, **kw: object) -> int:
        trial = create_trial(
            state=state,
            value=value,
            params=params,
            distributions={k: _DISTRIBUTIONS[k] for k in params},
            **kw,  # type: ignore[arg-type]
        )
        study.add_trial(trial)
        return len(study.get_trials(deepcopy=False)) - 1

    base_params = {"method": "none", "kv_cache_memory_bytes": _KV_BYTES, "max_num_seqs": 8}
    base_spec = ServerSpec(model=SAMPLE_MODEL, kv_cache_memory_bytes=_KV_BYTES, max_num_seqs=8)
    n = add(
        TrialState.COMPLETE,
        base_params,
        baseline.value,
        user_attrs=_attrs(
            Role.BASELINE,
            base_spec,
            **{TrialAttr.KV_CACHE_TOKENS: 36253},
            **_probe(probes, "baseline"),
        ),
        constraints={"0": 0.0},
    )
    base_tasks = _tasks([["all", "all", "partial"], ["all", "all", "none"], ["all"] * 3], 3)
    store.save_trial(
        study_name,
        n,
        TrialMeasurements(
            (_start(base_spec, 36253),),
            _workload(baseline, base_tasks, prefix_cache_hit_ratio=0.78, preemptions=0),
            (ThroughputRecord(1, 4, 1024, 25.6), ThroughputRecord(8, 16, 4096, 27.2)),
        ),
    )

    ngram_params = {**base_params, "method": "ngram", "num_speculative_tokens": 3}
    ngram_params |= {"prompt_lookup_min": 2, "prompt_lookup_max": 5}
    ngram_spec = base_spec.replace(
        speculative=SpeculativeSpec(
            method="ngram", num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=5
        )
    )
    n = add(
        TrialState.COMPLETE,
        ngram_params,
        ngram.value,
        user_attrs=_attrs(Role.CANDIDATE, ngram_spec, **_probe(probes, "ngram")),
        constraints={"0": 0.0},
    )
    ngram_classes = [
        ["one_block_short", "all", "partial"],
        ["all", "one_block_short", "none"],
        ["all", "one_block_short", "partial"],
    ]
    ngram_wins = 3 if ngram.value > baseline.value else 2
    ngram_tasks = _tasks(ngram_classes, ngram_wins, ngram_task_s)
    store.save_trial(
        study_name,
        n,
        TrialMeasurements(
            (_start(ngram_spec, 27405),),
            _workload(
                ngram,
                ngram_tasks,
                prefix_cache_hit_ratio=0.61,
                preemptions=2,
                spec_drafts=200,
                spec_draft_tokens=600,
                spec_accepted_tokens=180,
                spec_accepted_per_pos=(100, 60, 20),
                energy_joules=5000.0,
            ),
            (ThroughputRecord(1, 4, 1024, 16.0), ThroughputRecord(8, 16, 4096, 20.48)),
        ),
    )

    deep_spec = base_spec.replace(
        speculative=SpeculativeSpec(method="ngram", num_speculative_tokens=5)
    )
    n = add(
        TrialState.COMPLETE,
        {**base_params, "method": "ngram", "num_speculative_tokens": 5},
        0.0,
        user_attrs=_attrs(
            Role.CANDIDATE,
            deep_spec,
            **{
                TrialAttr.INFEASIBLE: True,
                TrialAttr.FAILURE_KIND: "no_cache_memory",
                TrialAttr.FAILURE_REASON: "No available memory for the cache blocks.",
            },
        ),
        constraints={"0": 1.0},
    )
    store.save_trial(
        study_name, n, TrialMeasurements((_start(deep_spec, None, "no_cache_memory"),))
    )

    n = add(
        TrialState.FAIL,
        {**base_params, "max_num_seqs": 4},
        None,
        user_attrs=_attrs(
            Role.CANDIDATE,
            base_spec.replace(max_num_seqs=4),
            **{TrialAttr.FAILURE_KIND: "unknown", TrialAttr.FAILURE_REASON: "Engine core died"},
        ),
    )

    mtp_spec = base_spec.replace(mtp_layers=1).replace(
        speculative=SpeculativeSpec(method="mtp", num_speculative_tokens=1)
    )
    add(
        TrialState.PRUNED,
        {**base_params, "method": "mtp", "num_speculative_tokens": 1},
        None,
        user_attrs=_attrs(
            Role.CANDIDATE,
            mtp_spec,
            **{
                TrialAttr.TASKS_PER_HOUR: 300.0,
                TrialAttr.TASKS_PER_HOUR_LOW: 250.0,
                TrialAttr.TASKS_PER_HOUR_HIGH: 350.0,
                TrialAttr.KV_CACHE_TOKENS: 19727,
                TrialAttr.PRUNED_AT_TASKS: 4,
            },
        ),
        intermediate_values={2: 280.0, 4: 300.0},
    )

    cut_spec = base_spec.replace(kv_cache_memory_bytes=1_500_000_000)
    n = add(
        TrialState.COMPLETE,
        {**base_params, "kv_cache_memory_bytes": 1_500_000_000},
        467.0,
        user_attrs=_attrs(
            Role.CONTROL,
            cut_spec,
            **{TrialAttr.CONTROL_OF: 1, TrialAttr.CONTROL_KIND: ControlKind.KV_CUT},
            **{TrialAttr.TASKS_PER_HOUR_LOW: 440.0, TrialAttr.TASKS_PER_HOUR_HIGH: 490.0},
            **{TrialAttr.TASKS_PER_HOUR: 467.0, TrialAttr.KV_CACHE_TOKENS: 27405},
        ),
        constraints={"0": 0.0},
    )
    for round_, (base_tph, ngram_tph) in enumerate(confirm):
        for of, spec, tph, tasks in (
            (0, base_spec, base_tph, base_tasks),
            (1, ngram_spec, ngram_tph, ngram_tasks),
        ):
            params = base_params if of == 0 else ngram_params
            where = {TrialAttr.CONFIRM_OF: of, TrialAttr.CONFIRM_ROUND: round_}
            if tph is None:  # this start failed
                n = add(
                    TrialState.FAIL,
                    params,
                    None,
                    user_attrs=_attrs(
                        Role.CONFIRM,
                        spec,
                        **where,
                        **{
                            TrialAttr.FAILURE_KIND: "startup_timeout",
                            TrialAttr.FAILURE_REASON: "no answer on /health within 900 s",
                        },
                    ),
                )
                store.save_trial(
                    study_name, n, TrialMeasurements((_start(spec, None, "startup_timeout"),))
                )
                continue
            extra = _probe(probes, "baseline2") if of == 0 and round_ == 0 else {}
            n = add(
                TrialState.COMPLETE,
                params,
                tph,
                user_attrs=_attrs(Role.CONFIRM, spec, **where, **extra),
                constraints={"0": 0.0},
            )
            score = SampleScore(tph, tph * 0.95, tph * 1.05)
            store.save_trial(
                study_name,
                n,
                TrialMeasurements((_start(spec, 36253),), _workload(score, tasks)),
            )
    store.close()
    storage.remove_session()
    storage.engine.dispose()
    return study_name


def _probe(probes: Mapping[str, ProbeData], key: str) -> dict[str, object]:
    if key not in probes:
        return {}
    data = probes[key]
    if isinstance(data, dict):  # a whole stored probe (ProbeResult.to_json), log-probs and all
        return {TrialAttr.PROBE: data}
    return {TrialAttr.PROBE: {"outputs": data, "max_tokens": 32, "wall_s": 1.0}}
