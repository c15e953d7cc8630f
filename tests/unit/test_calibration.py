"""The workload's sizing rule (`tuner.study.preflight.calibration`, `tuner.workload.calibration`).

Every expected number here is worked out by hand in the comments, from the rule as
docs/workload.md states it: a sizing's window is its uncached prompt tokens / prefill tok/s,
plus its cached prompt tokens x their measured cost, plus its output tokens / decode tok/s;
the first sizing that fits the target wins, else the smallest; contexts shrink to 3/4 and 1/2
before tasks shrink, down to 4 tasks per agent (at least 8) on CPU presets.
"""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import BF16_CPU
from tuner.study.preflight.calibration import scaled_shape, sizing_plan
from tuner.study.preflight.dtype import resolve_dtype
from tuner.study.preflight.sizing import min_tasks
from tuner.study.search.estimate import estimate_line
from tuner.study.space import load_preset
from tuner.workload.calibration import Calibration, SizingOption, SizingPlan, Speeds
from tuner.workload.settings import WorkloadSettings
from tuner.workload.shape import SuiteShape


def _option(tasks: int, prefill: int, decode: int, scale: float = 1.0) -> SizingOption:
    return SizingOption(WorkloadSettings(tasks=tasks, agents=2), scale, prefill, decode)


def test_a_sizing_window_is_prefill_over_its_rate_plus_decode_over_its_rate() -> None:
    # 9,000 uncached prompt tokens at 300 tok/s = 30 s; 2,000 output tokens at 20 tok/s = 100 s.
    assert _option(12, 9000, 2000).seconds(Speeds(300.0, 20.0, 2)) == pytest.approx(130.0)
    # 60,000 cached tokens at 0.5 ms each add 30 s.
    cached = SizingOption(WorkloadSettings(tasks=12, agents=2), 1.0, 9000, 2000, 60_000)
    assert cached.seconds(Speeds(300.0, 20.0, 2, cached_s_per_token=0.0005)) == pytest.approx(160.0)


def test_the_first_sizing_that_fits_the_window_is_chosen() -> None:
    plan = SizingPlan(
        (
            _option(12, 9000, 2000),  # 30 + 100 = 130 s
            _option(12, 6000, 2000, 0.75),  # 20 + 100 = 120 s: fits a 120 s window exactly
            _option(12, 3000, 2000, 0.5),  # 10 + 100 = 110 s
        ),
        window_s=120.0,
    )
    speeds = Speeds(300.0, 20.0, 2)
    assert plan.choose(speeds).context_scale == 0.75
    # A box twice as fast decodes 2,000 tokens in 50 s: the preset's 30 + 50 = 80 s fits.
    assert plan.choose(Speeds(300.0, 40.0, 2)).context_scale == 1.0
    # A box where even the smallest takes 3000/100 + 2000/10 = 230 s gets the smallest.
    assert plan.choose(Speeds(100.0, 10.0, 2)).context_scale == 0.5


def test_the_calibration_record_says_what_was_scaled_and_survives_json() -> None:
    plan = SizingPlan((_option(12, 9000, 2000), _option(8, 2000, 1200, 0.5)), window_s=120.0)
    # 9000/300 + 2000/20 = 130 s > 120; 2000/300 + 1200/20 = 6.7 + 60 = 66.7 s.
    calibration = plan.calibrate(Speeds(300.0, 20.0, 2), trial_number=0, startup_s=40.0)
    assert calibration.scaled and calibration.settings.tasks == 8
    assert calibration.preset_estimate_s == pytest.approx(130.0)
    assert calibration.estimate_s == pytest.approx(2000 / 300 + 60.0)
    line = calibration.line()
    assert line.startswith("calibrated on trial 0: prefill 300 tok/s, decode 20.0 tok/s (2 ")
    assert "workload scaled to 8 tasks" in line and "to fit a 120 s window" in line
    assert "would take about 130 s" in line
    assert Calibration.from_json(calibration.to_json()) == calibration


def test_contexts_scale_together_and_keep_their_floors() -> None:
    cpu = SuiteShape.cpu_small()  # prefix 1,024, context 3,072, tool outputs 50 / 120 / 300
    half = scaled_shape(cpu, 0.5)
    assert (half.shared_prefix_tokens, half.max_context_tokens) == (512, 1536)
    assert (half.tool_output_median_tokens, half.tool_output_p90_tokens) == (25, 60)
    assert half.tool_output_max_tokens == 150
    three_quarters = scaled_shape(cpu, 0.75)
    assert (three_quarters.shared_prefix_tokens, three_quarters.max_context_tokens) == (768, 2304)
    # Turn lengths and steps are the workload's shape, not its context: kept.
    assert half.steps_max == cpu.steps_max and half.call_turn_max_tokens == 48
    # Floors: a 300-token prefix at 1/2 stays 200 (the shape's minimum), a 600-token context
    # stays 512.
    small = SuiteShape.cpu_small().model_copy(
        update={"shared_prefix_tokens": 300, "max_context_tokens": 600}
    )
    floor = scaled_shape(small, 0.5)
    assert (floor.shared_prefix_tokens, floor.max_context_tokens) == (200, 512)


def test_cpu_presets_may_shrink_to_four_tasks_per_agent_and_at_least_eight() -> None:
    assert min_tasks(2, cpu=True) == 8
    assert min_tasks(1, cpu=True) == 8
    assert min_tasks(3, cpu=True) == 12
    assert min_tasks(2) == 24  # GPU presets: unchanged


def test_the_cpu_preset_plan_shrinks_its_tasks_to_eight() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")  # 12 tasks, 2 agents
    assert preset.window_s == 120.0
    plan = sizing_plan(preset, 120.0)
    got = [(o.settings.tasks, o.context_scale) for o in plan.options]
    # Its contexts are mostly the fixed policy and tool text (about 1.1k tokens) and short
    # tool outputs: at 3/4 or 1/2 of them 12 tasks prefill 9,248 or 9,164 tokens against
    # 9,474, under the 10% a different workload must save, so only the task count shrinks.
    assert got == [(12, 1.0), (11, 1.0), (10, 1.0), (9, 1.0), (8, 1.0)]
    assert plan.options[0].settings == preset.workload
    assert {o.settings.shape for o in plan.options} == {preset.workload.shape}
    # Smaller sizings ask less of the server.
    prefill = [o.prefill_tokens for o in plan.options]
    assert prefill == sorted(prefill, reverse=True) and prefill[-1] < prefill[0]
    decode = [o.decode_tokens for o in plan.options]
    assert decode[-1] < decode[0]
    # A box decoding 1,000 tok/s and prefilling 10,000 keeps the preset's (a few seconds);
    # one decoding 5 tok/s cannot fit 8 tasks of 3-6 turns of 16-48 tokens (at least
    # 8 x 3 x 16 = 384 tokens: 77 s) plus their prefill in 60 s: the smallest, said so.
    assert not plan.calibrate(Speeds(10_000.0, 1_000.0, 2), 0).scaled
    slow = SizingPlan(plan.options, 60.0).calibrate(Speeds(100.0, 5.0, 2), 0)
    assert slow.scaled and slow.settings.tasks == 8 and slow.estimate_s > 60.0
    assert "the smallest sizing" in slow.line()


def test_contexts_shrink_where_they_are_most_of_the_prefill() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    shape = preset.workload.shape.model_copy(
        update={
            "tool_output_median_tokens": 400,
            "tool_output_p90_tokens": 600,
            "tool_output_max_tokens": 700,
            "max_context_tokens": 6144,
        }
    )
    long = preset.model_copy(
        update={"workload": preset.workload.model_copy(update={"shape": shape})}
    )
    plan = sizing_plan(long, 120.0)
    scales = [o.context_scale for o in plan.options if o.settings.tasks == 12]
    assert scales[0] == 1.0 and len(scales) > 1  # a smaller context is offered
    prefill = [o.prefill_tokens for o in plan.options if o.settings.tasks == 12]
    # Each one kept saves at least a tenth of the prefill of the one before.
    assert all(b <= 0.9 * a for a, b in itertools.pairwise(prefill))


def test_gpu_presets_and_traces_are_not_calibrated_unless_they_ask() -> None:
    gpu = load_preset(model="smollm2-135m", gpu="h200")
    assert gpu.window_s is None
    assert gpu.model_copy(update={"target_window_s": 300.0}).window_s == 300.0


def test_the_estimate_uses_the_calibration_not_the_recorded_grid() -> None:
    # As resolved on a CPU with bf16 (the grid's figures), whatever CPU runs the test.
    cpu = load_preset(model="smollm2-135m", gpu="cpu")  # plain benchmark: 1 and 8
    preset, _ = resolve_dtype(cpu, cpuinfo=BF16_CPU)
    plain = preset.model_copy(update={"throughput_requests": 8, "throughput_output_tokens": 32})
    chosen = preset.workload.model_copy(update={"tasks": 8, "warmup_tasks": 1})
    calibration = Calibration(
        trial_number=0, prefill_tps=300.0, decode_tps=16.0, streams=2, window_s=120.0,
        cached_s_per_token=0.0,
        preset_estimate_s=200.0, estimate_s=100.0, scaled=True, context_scale=0.5,
        preset_sizing="12 tasks", sizing="8 tasks, contexts <= 1,536 tokens",
        workload=chosen.model_dump(mode="json"), startup_s=30.0,
    )  # fmt: skip
    # Per run: 30 s start + 100 s x 9/8 tasks (warm-up) = 112.5 s + the plain benchmark's
    # (8 + 8) requests x 32 tokens = 512 tokens at 16 tok/s = 32 s: 174.5 s; 10 runs: 29 min.
    line = estimate_line(plain, 6, 4, calibration=calibration)
    assert line.startswith("estimate: about 29 min for 10 server runs"), line
    assert "about 174 s a run" in line or "about 175 s a run" in line
    assert "calibrated on this study's trial 0" in line and "grid" not in line
    # Before the first server calibrated: a guess, bounded by the window: 42.1 s start +
    # min(13 x 12.2 / 2 = 79.3 s, 120 x 13/12 = 130 s) + 46.9 s after = 168.3 s.
    guess = estimate_line(plain, 6, 4, window_s=120.0)
    assert "about 168 s a run" in guess and "a guess until the first server" in guess
    tight = estimate_line(plain, 6, 4, window_s=24.0)  # min(79.3, 24 x 13/12 = 26) = 26 s
    assert "about 115 s a run" in tight


def test_warm_up_sweeps_are_bounded_to_a_quarter_of_the_window_on_a_slow_box() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    plan = sizing_plan(preset, 120.0)
    # A CPU preset sweep: 2 agents, longest warm prompt 3,072 - 16 - 64 = 2,992 tokens; level 1
    # sends 2,992, level 2 sends 1,496 + 2,992: 7,480 prompt tokens and 3 x 16 output tokens.
    # On a Zen 3 in fp32 (340 tok/s prefill, 35.5 decode, trial 0 of the main command):
    # 7,480 / 340 + 48 / 35.5 = 22.0 + 1.35 = 23.4 s a sweep; a quarter of 120 s is 30 s: 1.
    slow = plan.calibrate(Speeds(340.0, 35.5, 2), 0)
    assert slow.settings.warmup_max_sweeps == 1
    assert slow.sweep_s == pytest.approx(23.35, abs=0.05)
    assert slow.line().endswith(
        "; warm-up shape sweeps at most 1 (one is about 23 s here, against 25% of the window)"
    )
    # Three times the speed: 7.8 s a sweep, 3 fit in 30 s: the preset's 3, and no words.
    fast = plan.calibrate(Speeds(1020.0, 106.5, 2), 0)
    assert fast.settings.warmup_max_sweeps == 3 and "sweeps" not in fast.line()
    # The bound survives the study attribute, and a workload without warm-up is not bounded.
    assert Calibration.from_json(slow.to_json()).settings.warmup_max_sweeps == 1
    cold = preset.model_copy(
        update={"workload": preset.workload.model_copy(update={"warmup_tasks": 0})}
    )
    assert (
        sizing_plan(cold, 120.0).calibrate(Speeds(340.0, 35.5, 2), 0).settings.warmup_max_sweeps
        == 3
    )
