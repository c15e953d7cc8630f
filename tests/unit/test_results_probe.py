"""A stored study whose probes carry log-probabilities: the guard's first-divergence verdict
reaches the decision and the report, which says where each prompt diverged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.results import choose_export, load_results
from tuner.results.decision import judge_study
from tuner.results.report import summary_lines
from tuner.testing.sample import SampleScore, write_sample_study

BASE = [[100 + i, 7, 8, 9, 10, 11, 12, 13] for i in range(16)]


def _probe(outputs: list[list[int]], margin_at_4: float) -> dict[str, Any]:
    """A stored probe: each token leads a runner-up (id 999) by 5 nats, by `margin_at_4` at
    position 4."""
    top = [
        [[[tok, -0.1], [999, -0.1 - (margin_at_4 if k == 4 else 5.0)]] for k, tok in enumerate(o)]
        for o in outputs
    ]
    return {"outputs": outputs, "max_tokens": 32, "wall_s": 1.0, "top_logprobs": top}


def _flipped(margin_at_4: float) -> dict[str, Any]:
    # Every answer takes the runner-up at position 4 and goes its own way after it.
    return _probe([[*o[:4], 999, 1, 2, 3] for o in BASE], margin_at_4)


def _study(tmp: Path, name: str, base_margin: float, cand: dict[str, Any]) -> Any:
    url = f"sqlite:///{tmp / f'{name}.db'}"
    write_sample_study(
        url,
        ngram=SampleScore(900, 850, 950),
        confirm=((750.0, 860.0),),
        probes={"baseline": _probe(BASE, base_margin), "ngram": cand},
    )
    return load_results(url)


def test_near_tie_flips_in_every_prompt_pass_and_the_config_is_exported(tmp_path: Path) -> None:
    results = _study(tmp_path, "ties", 0.125, _flipped(0.125))
    verdict = judge_study(results)[1]
    assert verdict.outputs is not None and verdict.outputs.judged_by_logprobs
    assert verdict.outputs.match < 0.6  # the old token-match rule saw a changed config
    assert not verdict.changes_outputs
    assert choose_export(results).trial.number == 1


def test_clear_changes_are_flagged_and_the_report_says_where(tmp_path: Path) -> None:
    results = _study(tmp_path, "clear", 5.0, _flipped(5.0))
    verdict = judge_study(results)[1]
    assert verdict.changes_outputs
    assert choose_export(results).trial.number == 0
    lines = summary_lines(results)
    firsts = next(x for x in lines if x.startswith("#1 first divergences"))
    assert "prompt 0 at token 4 (clear, margin 5.00 nats)" in firsts and "10 more" in firsts
