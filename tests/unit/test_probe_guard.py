"""The correctness probe end to end against the named fake vLLM: near-tie flips pass, clear
changes are flagged.

`tuner.testing.fake_vllm` stands in for what a real CPU build cannot be made to do on purpose:
a speculative server that flips a near-tie (as rounding does on some machines) and one that
changes a clear token (as a broken config would). The real build's verdict on the n-gram
config is measured by benchmarks/probe_check.py at 95daa70 (docs/correctness-probe.md).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuner.metrics.correctness import judge_outputs
from tuner.server import Launcher, ServerSpec
from tuner.server.spec import SpeculativeSpec
from tuner.settings import LaunchCommand
from tuner.testing.fake_vllm_answers import (
    CLEAR_MARGIN,
    CLEAR_POSITION,
    NEAR_TIE_MARGIN,
    NEAR_TIE_POSITION,
)
from tuner.workload import WorkloadSettings
from tuner.workload.correctness_probe import PROBE_PROMPTS, ProbeResult, run_probe_sync

FAKE = LaunchCommand((sys.executable, "-m", "tuner.testing.fake_vllm"))
NGRAM = SpeculativeSpec(
    method="ngram", num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=3
)
SETTINGS = WorkloadSettings(tasks=4, agents=1)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Launcher:
    root = tmp_path_factory.mktemp("fake")
    return Launcher(log_dir=root / "logs", state_dir=root / "run", launch_command=FAKE)


def _probe(launcher: Launcher, env: dict[str, str], speculative: bool) -> ProbeResult:
    spec = ServerSpec(
        model="fake-model",
        served_model_name="fake",
        speculative=NGRAM if speculative else None,
        env={"FAKE_VLLM_STARTUP_S": "0.1", **env},
    )
    with launcher.launch(spec, timeout_s=30) as handle:
        return run_probe_sync(handle.base_url, "fake", SETTINGS)


@pytest.fixture(scope="module")
def baseline(launcher: Launcher) -> Iterator[ProbeResult]:
    yield _probe(launcher, {}, speculative=False)


def test_the_probe_records_top_logprobs_per_token(baseline: ProbeResult) -> None:
    assert len(baseline.outputs) == PROBE_PROMPTS
    top = baseline.outputs.top
    assert top is not None
    assert all(len(t) == len(o) for t, o in zip(top, baseline.outputs, strict=True))
    first = top[0][NEAR_TIE_POSITION]
    assert first[0][0] == baseline.outputs[0][NEAR_TIE_POSITION]  # its own token leads
    assert first[0][1] - first[1][1] == pytest.approx(NEAR_TIE_MARGIN)
    # The JSON stored with a trial keeps them.
    again = ProbeResult.from_json(baseline.to_json())
    assert again is not None and again.outputs.top == top and again.outputs == baseline.outputs


def test_a_server_that_flips_near_ties_is_not_flagged(
    launcher: Launcher, baseline: ProbeResult
) -> None:
    flipped = _probe(launcher, {"FAKE_VLLM_FLIP_NEAR_TIES": "1"}, speculative=True)
    check = judge_outputs(baseline.outputs, flipped.outputs)
    # Every answer differs from the near-tie on: a token-match guard would refuse it.
    assert check.match < 0.8
    assert len(check.divergences) == PROBE_PROMPTS
    assert {d.position for d in check.divergences} == {NEAR_TIE_POSITION}
    assert {d.kind for d in check.divergences} == {"near_tie"}
    assert not check.changes_outputs
    assert "rounding, not a change" in check.describe()


def test_a_server_that_changes_a_clear_token_is_flagged(
    launcher: Launcher, baseline: ProbeResult
) -> None:
    changed = _probe(launcher, {"FAKE_VLLM_CHANGE_CLEAR_TOKEN": "1"}, speculative=True)
    check = judge_outputs(baseline.outputs, changed.outputs)
    assert {d.position for d in check.divergences} == {CLEAR_POSITION}
    assert {d.kind for d in check.divergences} == {"clear"}
    assert check.divergences[0].margin == pytest.approx(CLEAR_MARGIN)
    assert check.changes_outputs
    assert "changes outputs" in check.describe()
    assert check.to_json()["divergences"][0]["kind"] == "clear"


def test_a_plain_server_with_the_same_answers_is_not_flagged(
    launcher: Launcher, baseline: ProbeResult
) -> None:
    # The fake's speculative server without a failure mode answers exactly the baseline's.
    same = _probe(launcher, {}, speculative=True)
    check = judge_outputs(baseline.outputs, same.outputs)
    assert check.divergences == () and not check.changes_outputs
    assert check.match == 1.0


def test_the_probe_stored_before_logprobs_still_loads(tmp_path: Path) -> None:
    old = {"outputs": [[1, 2, 3], [4, 5]], "max_tokens": 32, "wall_s": 1.5}
    probe = ProbeResult.from_json(old)
    assert probe is not None and probe.outputs.top is None and probe.in_flight == 4
    assert probe.outputs == ((1, 2, 3), (4, 5))
