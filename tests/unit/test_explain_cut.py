"""`tuner explain`'s pieces: the KV-cut control's block count (the candidate's KV tokens in the
baseline's blocks), the split it prints, and the notes on what it could not run."""

from __future__ import annotations

import optuna

from tuner.attrs import StudyAttr, TrialAttr
from tuner.records import StartupFacts
from tuner.results.attribution import attribute
from tuner.study.stages.controls import KV_MATCH, Explanation, _notes, cut_blocks


def test_cut_holds_the_candidates_tokens_in_the_baselines_blocks() -> None:
    # The H200 study of the 27B shape (tests/assets/qwen3.8-27b-shape-h200.db): no speculation
    # had 50,546 KV tokens in 145 blocks of 400-token attention pages, MTP 34,105 in 102 blocks
    # of 416. MTP's own count would give the baseline 102 x 50,546 / 145 = 35,556 tokens
    # (4.3% over); the baseline's tokens per block give 98 blocks, 34,162 tokens (0.2% over).
    base = StartupFacts(kv_cache_tokens=50_546, num_gpu_blocks=145)
    mtp = StartupFacts(kv_cache_tokens=34_105, num_gpu_blocks=102)
    blocks = cut_blocks(base, mtp)
    assert blocks == 98
    assert abs(blocks * 50_546 / 145 / 34_105 - 1) <= KV_MATCH
    assert abs(102 * 50_546 / 145 / 34_105 - 1) > KV_MATCH


def test_no_cut_without_the_facts_it_needs() -> None:
    mtp = StartupFacts(kv_cache_tokens=34_105, num_gpu_blocks=102)
    assert cut_blocks(None, mtp) is None
    assert cut_blocks(StartupFacts(kv_cache_tokens=51_592), mtp) is None
    assert cut_blocks(StartupFacts(kv_cache_tokens=50_546, num_gpu_blocks=145), None) is None


def _explanation(baseline: float, candidate: float, kv_cut: float) -> Explanation:
    return Explanation(
        study_name="s",
        candidate=2,
        rows=(),
        attribution=attribute(baseline, candidate, kv_cut),
        controls_run=1,
    )


def test_the_split_names_memory_and_what_is_left_to_reuse_and_drafting() -> None:
    # The published card: 752 without speculation, 467 cut to MTP's cache, MTP 330.
    assert _explanation(752, 330, 467).split() == (
        "of the 422 tasks/h lost, memory explains 285 (68%) and 137 (32%) is left to cache "
        "reuse and drafting"
    )
    assert _explanation(500, 520, 480).split() == "no loss to split"


def test_notes_say_what_could_not_run_and_that_dummy_weights_measure_no_acceptance() -> None:
    study = optuna.create_study()
    study.set_user_attr(StudyAttr.VLLM_LACKS, ["disable_eagle_block_drop"])
    study.set_user_attr(StudyAttr.VLLM_VERSION, "0.26.0")
    study.enqueue_trial({"method": "mtp"})
    trial = study.ask({"method": optuna.distributions.CategoricalDistribution(["mtp"])})
    trial.set_user_attr(TrialAttr.DUMMY_WEIGHTS, True)
    study.tell(trial, 281.0)
    mtp = study.trials[0]
    notes = _notes(study, mtp, 0.004)
    assert len(notes) == 2
    assert "vLLM 0.26.0 has no disable_eagle_block_drop" in notes[0]
    assert "cannot run here" in notes[0]
    assert notes[1].startswith("dummy weights: acceptance is not measured")
    # A cut more than 2% off the candidate's KV tokens is flagged; within 2% it is not.
    assert "-13.1% KV tokens" in _notes(study, mtp, -0.131)[0]
    assert not any("KV tokens against" in n for n in _notes(study, mtp, 0.019))
