"""Load sweep analysis on stored data: winners per load, crossover, the per-load answer, schedule.

Every expectation is worked out by hand from the numbers written here. Within one run every
task takes the same time, so a paired bootstrap resample has the same ratio as the run itself:
the intervals collapse onto the hand-computed ratios.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import create_trial

from tuner.errors import StudyError
from tuner.metrics import DEFAULT_NOISE, BetweenRunNoise
from tuner.results.load_sweep import (
    SWEEP_ATTR,
    LoadPoint,
    LoadSweep,
    SweptConfig,
    crossover_sentence,
    derive_schedule,
    load_sentences,
    load_table_rows,
    sweep_from_attrs,
    winner_at,
)
from tuner.results.load_sweep_plot import sweep_png
from tuner.study.stages.load_sweep import choose_finalists

TASKS = 6


def point(agents: int, task_s: float, wall_s: float, ok: int = TASKS) -> LoadPoint:
    """A run of 6 tasks of `task_s` each in `wall_s`; the first `ok` succeed."""
    tph = ok * 3600 / wall_s
    return LoadPoint(
        agents=agents,
        tasks=TASKS,
        successes=ok,
        wall_s=wall_s,
        tasks_per_hour=tph,
        tasks_per_hour_low=tph,
        tasks_per_hour_high=tph,
        latency_p50_s=task_s,
        latency_p90_s=task_s,
        outcomes=tuple((f"t{i}", i < ok, task_s) for i in range(TASKS)),
    )


BASE = SweptConfig(
    key="#0",
    label="no speculation",
    trial_number=0,
    params={"method": "none", "max_num_seqs": 8},
    serve_command="vllm serve m",
    is_baseline=True,
    # 1 agent: 60 s -> 360/h; 2 agents: 36 s -> 600/h; 4 agents: 20 s -> 1080/h.
    points=(point(1, 10, 60), point(2, 12, 36), point(4, 10, 20)),
)
NGRAM3 = SweptConfig(
    key="#3",
    label="n-gram depth 3",
    trial_number=3,
    params={"method": "ngram", "num_speculative_tokens": 3, "max_num_seqs": 8},
    serve_command="vllm serve m --speculative-config ...",
    # 720/h (x2.0), 900/h (x1.5), 864/h (x0.8).
    points=(point(1, 5, 30), point(2, 8, 24), point(4, 12.5, 25)),
)
NGRAM1 = SweptConfig(
    key="#5",
    label="n-gram depth 1",
    trial_number=5,
    params={"method": "ngram", "num_speculative_tokens": 1, "max_num_seqs": 8},
    serve_command="vllm serve m --speculative-config ...",
    # 480/h (x1.33), 720/h (x1.2), 1296/h (x1.2).
    points=(point(1, 7.5, 45), point(2, 10, 30), point(4, 50 / 6, 50 / 3)),
)


# A study whose own repeats pinned the between-run noise down: sd 0.0337 of one run's log ratio
# over 10 df (the noise the sentences and schedules below were worked out at). With one run
# per load the interval is exp(log r +- t(0.975, 10) x 0.0337) = r x [0.928, 1.078]: x1.2 and
# up clear it, and x0.8 loses.
PINNED = BetweenRunNoise(0.0337, 10, "a study's repeats (test)")


def sweep(
    *configs: SweptConfig, preset_agents: int = 4, noise: BetweenRunNoise = PINNED
) -> LoadSweep:
    return LoadSweep((1, 2, 4), preset_agents, "replay", TASKS, configs, noise)


def test_winner_per_load_follows_the_export_rule() -> None:
    s = sweep(BASE, NGRAM3)
    assert [winner_at(s, n).key for n in (1, 2, 4)] == ["#3", "#3", "#0"]  # type: ignore[union-attr]


def test_crossover_sentence() -> None:
    assert crossover_sentence(sweep(BASE, NGRAM3)) == (
        "n-gram depth 3 wins up to 2 agents, the baseline from 4"
    )
    assert crossover_sentence(sweep(BASE, NGRAM1)) == (
        "n-gram depth 1 wins at every load measured (1-4 agents)"
    )
    # Depth 3 is the best at 1 and 2 agents (x2.0 and x1.5 beat x1.33 and x1.2), depth 1 at 4.
    assert crossover_sentence(sweep(BASE, NGRAM3, NGRAM1)) == (
        "n-gram depth 3 wins up to 2 agents, n-gram depth 1 from 4"
    )


def test_one_sentence_per_load_against_the_reference_answer() -> None:
    assert load_sentences(sweep(BASE, NGRAM3)) == [
        "for 4 agents, export no speculation; "
        "for 1 agent, n-gram depth 3 would be 2.00x faster [1.86, 2.16]; "
        "for 2 agents, n-gram depth 3 would be 1.50x faster [1.39, 1.62]"
    ]
    # The study ran at 1 agent: there depth 3 is the answer; at 4 agents the baseline is
    # 1080 / 864 = 1.25x faster than depth 3.
    assert load_sentences(sweep(BASE, NGRAM3, preset_agents=1)) == [
        "for 1 agent, export n-gram depth 3; "
        "for 2 agents, the same (nothing beats it beyond the noise); "
        "for 4 agents, no speculation would be 1.25x faster [1.16, 1.35]"
    ]


def test_a_gain_inside_the_noise_does_not_win() -> None:
    # One run per load: the comparison's interval is the recorded between-run term (run-to-run
    # sd 0.034 of the log ratio), so x1.05 (378/h against 360/h) is inside the noise, however
    # its tasks spread (3 of 2.5 s and 3 of 20 s in 57.1 s).
    mixed = LoadPoint(
        agents=1,
        tasks=TASKS,
        successes=TASKS,
        wall_s=6 * 3600 / 378,
        tasks_per_hour=378,
        tasks_per_hour_low=300,
        tasks_per_hour_high=700,
        latency_p50_s=12.5,
        latency_p90_s=20,
        outcomes=tuple((f"t{i}", True, 2.5 if i < 3 else 20.0) for i in range(TASKS)),
    )
    noisy = SweptConfig(
        key="#7",
        label="n-gram depth 4",
        trial_number=7,
        params=D4,
        serve_command="x",
        points=(mixed,),
    )
    s = LoadSweep((1,), 1, "replay", TASKS, (BASE, noisy))
    assert winner_at(s, 1).key == "#0"  # type: ignore[union-attr]


def test_schedule_from_the_sweep() -> None:
    # Depth 3 at 1 and 2 agents, the baseline (depth 0) from 4: batch sizes 3..8 get 0.
    host, schedule = derive_schedule(sweep(BASE, NGRAM3))  # type: ignore[misc]
    assert host.key == "#3"
    assert schedule == ((1, 2, 3), (3, 8, 0))
    host, schedule = derive_schedule(sweep(BASE, NGRAM3, NGRAM1), max_num_seqs=16)  # type: ignore[misc]
    assert host.key == "#3"
    assert schedule == ((1, 2, 3), (3, 16, 1))
    # One static depth wins everywhere: no schedule.
    assert derive_schedule(sweep(BASE, NGRAM1)) is None


def test_table_cells() -> None:
    columns, rows = load_table_rows(sweep(BASE, NGRAM3))
    assert columns[1] == "1 agent: tasks/h [interval] / task p50"
    assert rows[0] == (
        "#0 no speculation",
        "360 [360-360] / 10.0 s",
        "600 [600-600] / 12.0 s",
        "1,080 [1,080-1,080] / 10.0 s",
        "4",
    )
    assert rows[1][-1] == "1, 2"


def test_stored_sweep_round_trips_through_a_study(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage)
    original = sweep(BASE, NGRAM3)
    study.set_user_attr(SWEEP_ATTR, original.to_json())
    loaded = sweep_from_attrs(optuna.load_study(study_name="s", storage=storage).user_attrs)
    assert loaded == original
    assert crossover_sentence(loaded) == crossover_sentence(original)  # type: ignore[arg-type]
    assert sweep_png(loaded).startswith(b"\x89PNG")  # type: ignore[arg-type]


def _trial(number: int, value: float, params: dict, **attrs: object) -> optuna.trial.FrozenTrial:
    dists = {
        "method": CategoricalDistribution(["none", "ngram"]),
        "num_speculative_tokens": IntDistribution(1, 4),
    }
    t = create_trial(
        params=params,
        distributions={k: dists[k] for k in params},
        value=value,
        user_attrs=attrs,
    )
    t.number = number
    return t


NONE = {"method": "none"}
D2, D3, D4 = ({"method": "ngram", "num_speculative_tokens": d} for d in (2, 3, 4))


def test_finalists_are_the_baseline_and_the_top_distinct_candidates() -> None:
    trials = [
        _trial(0, 100, NONE, role="baseline"),
        _trial(1, 150, D2, role="candidate"),
        _trial(2, 90, D4, role="candidate"),
        _trial(3, 140, D2, role="candidate"),
        _trial(4, 120, D3, role="candidate"),
    ]
    picked = choose_finalists(trials, top=2)
    assert [(f.key, f.is_baseline) for f in picked] == [("#0", True), ("#1", False), ("#4", False)]


def test_finalists_come_from_confirmation_when_it_ran() -> None:
    trials = [
        _trial(0, 100, NONE, role="baseline"),
        _trial(1, 150, D2, role="candidate"),
        _trial(2, 120, D3, role="candidate"),
        _trial(3, 130, D4, role="candidate"),
        # Confirmed: #1 fell to 95 on average, #2 held 125; #3 was not confirmed.
        _trial(4, 90, D2, role="confirm", confirm_of=1),
        _trial(5, 100, D2, role="confirm", confirm_of=1),
        _trial(6, 125, D3, role="confirm", confirm_of=2),
        _trial(7, 101, NONE, role="confirm", confirm_of=0),
    ]
    assert [f.key for f in choose_finalists(trials, top=1)] == ["#0", "#2"]
    assert [f.key for f in choose_finalists(trials, top=3)] == ["#0", "#2", "#1"]


def test_no_baseline_no_sweep() -> None:
    trials = [_trial(1, 150, D2, role="candidate")]
    with pytest.raises(StudyError, match="no finished baseline"):
        choose_finalists(trials, top=2)


def test_the_report_carries_the_sweep() -> None:
    from tuner.results.plots import render_plots
    from tuner.results.report import report_tables, summary_lines
    from tuner.results.rows import StudyResults

    results = StudyResults("s", "sqlite:///x", "m", "cpu", (), "replay", sweep(BASE, NGRAM3))
    table = report_tables(results)[-1]
    assert table.title == "Load sweep (tuner sweep)"
    assert table.column("config") == ["#0 no speculation", "#3 n-gram depth 3"]
    lines = summary_lines(results)
    assert "Load: n-gram depth 3 wins up to 2 agents, the baseline from 4" in lines
    assert (
        "Load: depth schedule from the sweep (on #3's server): "
        "batch 1-2: depth 3, batch 3-8: depth 0" in lines
    )
    assert render_plots(results)["load_sweep.png"].startswith(b"\x89PNG")


def test_a_schedule_runs_on_its_host_server_with_its_top_depth() -> None:
    from tuner.study.space import load_preset
    from tuner.study.stages.load_sweep import _spec, schedule_finalist

    derived = schedule_finalist(sweep(BASE, NGRAM3, NGRAM1))
    assert derived is not None
    assert (derived.key, derived.trial_number, derived.schedule) == (
        "schedule",
        3,
        ((1, 2, 3), (3, 8, 1)),
    )
    # Given: hosted by the finalist best at 1 agent (depth 3: 720/h against depth 1's 480/h).
    given = schedule_finalist(sweep(BASE, NGRAM1, NGRAM3), ((1, 1, 2), (2, 8, 0)))
    assert given is not None and given.trial_number == 3
    assert given.params["num_speculative_tokens"] == 2
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    spec = _spec(preset, given, "/models/smollm2")
    assert spec.speculative_config() == {
        "method": "ngram",
        "num_speculative_tokens": 2,
        "num_speculative_tokens_per_batch_size": [[1, 1, 2], [2, 8, 0]],
    }
    assert spec.max_num_seqs == 8


def test_one_run_per_load_at_a_wide_prior_calls_only_large_gains() -> None:
    # A study with no repeats of its own: sd 0.065 over 2 df, so one run's interval is
    # r x exp(+-4.303 x 0.065) = r x [0.756, 1.323]. Depth 1's x1.33 at 1 agent clears 1
    # (1.333 x 0.756 = 1.008); its x1.2 at 2 and 4 agents does not (0.907).
    wide = BetweenRunNoise(0.065, 2, "a prior without repeats (test)")
    s = sweep(BASE, NGRAM1, noise=wide)
    assert [winner_at(s, n).key for n in (1, 2, 4)] == ["#5", "#0", "#0"]  # type: ignore[union-attr]
    # The same runs at the pinned noise: x1.2 clears [0.928, 1.078] at every load.
    s = sweep(BASE, NGRAM1)
    assert [winner_at(s, n).key for n in (1, 2, 4)] == ["#5", "#5", "#5"]  # type: ignore[union-attr]


def test_the_sweep_keeps_its_noise_and_an_old_sweep_reads_as_the_default() -> None:
    s = sweep(BASE, NGRAM3)
    back = LoadSweep.from_json(s.to_json())
    assert (back.noise.log_sd, back.noise.df) == (0.0337, 10)
    old = s.to_json()
    del old["noise"]  # stored before sweeps carried their noise
    assert LoadSweep.from_json(old).noise == DEFAULT_NOISE
