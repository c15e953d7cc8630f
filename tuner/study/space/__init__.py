"""Presets: a model, a GPU and the search space over a vLLM server's speculative configuration.

A preset is a YAML file validated here (`extra="forbid"`, so a typo is an error, not a silent
default). `--model M --gpu G` picks `search_spaces/M/G.yaml`; `--space FILE` takes any file.
`suggest()` turns an Optuna trial into a `ServerSpec`; the space knows nothing of processes.

The room by concern: `parts` (the model, the card, the baseline, what was measured), `preset`
(the whole preset, its search space and a candidate's server), `files` (reading a preset file
and its errors). This package holds `config_key`, the one name of a config, and gives every
public name of its modules (the study imports them from here).
"""

from __future__ import annotations

import json
from typing import Any

from tuner.study.space.files import known_presets, load_preset, preset_dir
from tuner.study.space.parts import ConfirmPart, GpuPart, ModelPart
from tuner.study.space.preset import DEFAULT_CPU_WINDOW_S, Preset, SearchSpace

__all__ = [
    "DEFAULT_CPU_WINDOW_S",
    "ConfigKey",
    "ConfirmPart",
    "GpuPart",
    "ModelPart",
    "Preset",
    "SearchSpace",
    "config_key",
    "known_presets",
    "load_preset",
    "preset_dir",
]

# A config's identity: its params (what defines its server) as sorted JSON, so it is hashable,
# the same in every process, and reads back into the params (`json.loads`).
ConfigKey = str


def config_key(params: dict[str, Any]) -> ConfigKey:
    """The one name of a config: its params as sorted JSON (`json.loads` gives them back)."""
    return json.dumps(params, sort_keys=True)
