"""Suffix decoding in a preset's space: offered where the capability probe finds it, with
vLLM's own knob names and rules, and sampled only for method "suffix".

No vLLM is asked here: the capabilities are built as the probe would answer (its real answer
on the CPU build is checked in tests/integration/test_capabilities.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
import pytest
from pydantic import ValidationError

from tuner.errors import ConfigError
from tuner.server.capabilities import VllmCapabilities
from tuner.study.preflight.checks import preflight
from tuner.study.space import Preset, SearchSpace, load_preset


def _caps(
    *, suffix: bool, methods: frozenset[str] = frozenset({"ngram", "suffix"})
) -> VllmCapabilities:
    return VllmCapabilities(
        version="0.32.0",
        python=sys.executable,
        spec_fields=frozenset({"method", "num_speculative_tokens", "prompt_lookup_min",
                               "prompt_lookup_max", "suffix_decoding_max_tree_depth"}),
        methods=methods,
        flags=None,
        suffix_decoding=suffix,
    )  # fmt: skip


def _adjusted(caps: VllmCapabilities | None) -> tuple[Preset, list[str]]:
    lines: list[str] = []
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    if caps is None:
        # A launch command that starts no vLLM (tuner's fake server): nothing to ask.
        from unittest import mock

        with mock.patch("tuner.study.preflight.checks.read_launch_capabilities") as read:
            read.return_value = None
            adjusted, _ = preflight(preset, cache_dir=Path("/unused"), say=lines.append)
    else:
        adjusted, _ = preflight(
            preset, cache_dir=Path("/unused"), say=lines.append, capabilities=caps
        )
    return adjusted, lines


def test_the_cpu_preset_searches_suffix_where_the_probe_finds_it() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    assert preset.space.methods == ("none", "ngram")
    assert preset.space.methods_if_available == ("suffix",)
    adjusted, lines = _adjusted(_caps(suffix=True))
    assert adjusted.space.methods == ("none", "ngram", "suffix")
    # The stored preset is the space searched: nothing is left conditional.
    assert adjusted.space.methods_if_available == ()
    assert "vLLM 0.32.0 can run speculative method 'suffix': searched" in lines


@pytest.mark.parametrize(
    ("model", "gpu", "searched"),
    [
        ("smollm2-135m", "h200", ("none", "ngram", "suffix")),
        ("qwen3.8-27b", "rtx4090", ("none", "ngram", "mtp", "suffix")),
        ("qwen3.8-27b", "rtx-pro-6000", ("none", "ngram", "mtp", "suffix")),
        # The 27B shape's rehearsal keeps its planned space: dummy weights judge no drafter.
        ("qwen3.8-27b-shape", "h200", ("none", "ngram", "mtp")),
        ("qwen3.8-27b-shape", "h100", ("none", "ngram", "mtp")),
    ],
)
def test_the_gpu_presets_search_suffix_where_it_loads(
    model: str, gpu: str, searched: tuple[str, ...]
) -> None:
    preset = load_preset(model=model, gpu=gpu)
    caps = _caps(suffix=True, methods=frozenset({"ngram", "mtp", "suffix"}))
    adjusted, _ = preflight(
        preset, cache_dir=Path("/unused"), say=lambda _: None, capabilities=caps
    )
    assert adjusted.space.methods == searched
    if "suffix" in searched:
        # The CPU preset's knobs, under vLLM's names.
        assert adjusted.space.suffix_decoding_max_tree_depth is not None
        assert adjusted.space.suffix_decoding_min_token_prob is not None


def test_without_arctic_inference_suffix_is_left_out_in_one_line() -> None:
    adjusted, lines = _adjusted(_caps(suffix=False))
    assert adjusted.space.methods == ("none", "ngram")
    assert adjusted.space.methods_if_available == ()
    (line,) = [x for x in lines if "suffix" in x]
    assert "arctic-inference does not import" in line and "not searched" in line
    # A vLLM without the method says that instead.
    _, lines = _adjusted(_caps(suffix=True, methods=frozenset({"ngram"})))
    assert "vLLM 0.32.0 has no speculative method 'suffix': not searched" in lines
    # tuner's fake server has no vLLM to ask: the file's `methods` only.
    adjusted, lines = _adjusted(None)
    assert adjusted.space.methods == ("none", "ngram")
    assert any("['suffix'] not searched: no vLLM to ask" in x for x in lines)


def test_an_explicit_suffix_is_refused_where_the_probe_cannot_import_it() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    space = preset.space.model_copy(
        update={"methods": ("none", "suffix"), "methods_if_available": ()}
    )
    explicit = preset.model_copy(update={"space": space})
    with pytest.raises(ConfigError, match="does not accept method suffix"):
        preflight(explicit, cache_dir=Path("/unused"), say=print, capabilities=_caps(suffix=False))


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"methods_if_available": ["none"]}, "'none' is always available"),
        ({"methods": ["none", "suffix"], "methods_if_available": ["suffix"]}, "repeats"),
        ({"suffix_decoding_max_tree_depth": {"low": 0, "high": 8}}, "low must be >= 1"),
        ({"suffix_decoding_max_spec_factor": {"low": -1.0, "high": 1.0}}, "low must be >= 0"),
        ({"suffix_decoding_min_token_prob": {"low": 0.1, "high": 1.5}}, r"must lie in \[0, 1\]"),
    ],
)
def test_space_refuses_what_vllm_would(space: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SearchSpace.model_validate(space)


def test_a_method_offered_if_available_is_checked_like_a_listed_one() -> None:
    data = json.loads(load_preset(model="smollm2-135m", gpu="cpu").model_dump_json())
    data["space"]["methods_if_available"] = ["mtp"]
    with pytest.raises(ValidationError, match="method 'mtp' needs a model with MTP layers"):
        Preset.model_validate(data)


def _sample(preset: Preset, method: str) -> dict[str, object]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    # The method is fixed; everything else is drawn from the space.
    study.enqueue_trial({"method": method})
    trial = study.ask()
    return preset.suggest(trial)


def test_suffix_knobs_are_drawn_for_suffix_only_and_render_as_vllm_names_them() -> None:
    adjusted, _ = _adjusted(_caps(suffix=True))
    params = _sample(adjusted, "suffix")
    assert params["method"] == "suffix"
    assert params["suffix_decoding_max_tree_depth"] in (8, 16, 24)
    prob = float(params["suffix_decoding_min_token_prob"])  # type: ignore[arg-type]
    assert any(prob == pytest.approx(v) for v in (0.1, 0.2, 0.3))
    assert 1 <= params["num_speculative_tokens"] <= 4  # type: ignore[operator]
    assert "prompt_lookup_min" not in params
    config = adjusted.server_spec(params, model_path="/m").speculative_config()
    assert config == {
        "method": "suffix",
        "num_speculative_tokens": params["num_speculative_tokens"],
        "suffix_decoding_max_tree_depth": params["suffix_decoding_max_tree_depth"],
        "suffix_decoding_min_token_prob": params["suffix_decoding_min_token_prob"],
    }
    ngram = _sample(adjusted, "ngram")
    assert not [k for k in ngram if k.startswith("suffix_")]
