"""A suffix-decoding trial on the real vLLM CPU build: offered by the probe, scored, stored.

`tuner optimize` on the CPU preset cut to one memory setting and the file's methods [none]
plus `methods_if_available: [suffix]`, so the one candidate after the baseline is suffix
decoding (three real starts with the floor start; about 5 min on 2 cores, hence `extended`).
Real SmolLM2-135M weights: its acceptance is the model's, not a dummy model's repeated token.
Skipped where arctic-inference is not installed (scripts/install.sh builds it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import optuna
import pytest
import yaml

from tests.e2e.conftest import run_optimize, short_space
from tuner.attrs import TrialAttr
from tuner.storage import Store
from tuner.study.search.roles import counts_toward_budget

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.extended,
    pytest.mark.skipif(
        importlib.util.find_spec("arctic_inference") is None,
        reason="arctic-inference is not installed (scripts/install.sh builds it)",
    ),
]


def test_a_suffix_trial_is_scored_and_stored_with_its_acceptance(
    tmp_path: Path, cache_dir: Path, smollm2_path: Path
) -> None:
    space = short_space(tmp_path)
    data = yaml.safe_load(space.read_text())
    data["space"].update(
        methods=["none"],
        methods_if_available=["suffix"],
        kv_cache_memory_bytes=[2_000_000_000],
        max_num_seqs=[8],
        num_speculative_tokens={"low": 4, "high": 4},
    )
    space.write_text(yaml.safe_dump(data))
    url = f"sqlite:///{tmp_path / 'suffix.db'}"
    done = run_optimize(space, url, "suffix-e2e", cache_dir, 2, "--confirm", "0", "--no-screening")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "can run speculative method 'suffix': searched" in out, out
    study = optuna.load_study(study_name="suffix-e2e", storage=url)
    stored_space = study.user_attrs["preset"]["space"]
    assert stored_space["methods"] == ["none", "suffix"], stored_space
    (baseline, suffix) = [t for t in study.trials if counts_toward_budget(t)]
    assert baseline.params["method"] == "none"
    assert suffix.params["method"] == "suffix", suffix.params
    assert suffix.state == optuna.trial.TrialState.COMPLETE, suffix.user_attrs
    rate = suffix.user_attrs[TrialAttr.ACCEPTANCE_RATE]
    # The agent workload quotes tool outputs back: real weights accept a good share of drafts.
    assert 0.2 < rate <= 1.0, rate
    store = Store(url)
    try:
        (run,) = store.workload_runs("suffix-e2e", suffix.number)
        (start,) = store.server_starts("suffix-e2e", suffix.number)
    finally:
        store.close()
    w = run.record
    assert w.spec_drafts and w.spec_draft_tokens and w.spec_accepted_tokens
    assert w.acceptance_rate == pytest.approx(rate, abs=1e-4)
    assert w.mean_acceptance_length is not None and w.mean_acceptance_length > 1.0
    # The server ran what the trial says: vLLM's suffix method, its knobs by vLLM's names.
    argv = start.record.argv
    config = argv[argv.index("--speculative-config") + 1]
    assert '"method":"suffix"' in config and '"num_speculative_tokens":4' in config
    assert '"suffix_decoding_max_tree_depth"' in config
