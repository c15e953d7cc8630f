"""arctic-inference's general vLLM plugin on the installed vLLM: loaded, and a no-op unless asked.

`scripts/install.sh` installs arctic-inference for suffix decoding, and the package registers
`arctic_inference.vllm.plugin:arctic_inference_plugin` under `vllm.general_plugins`, which
every vLLM process (API server, engine core, workers) loads at start. These tests run vLLM's
own plugin loader in a subprocess of this venv's Python (no server): the plugin loads and
returns without touching vLLM while ARCTIC_INFERENCE_ENABLED is unset, so it may stay loaded
(no VLLM_PLUGINS needed); with ARCTIC_INFERENCE_ENABLED=1 it refuses the CPU platform, so the
launcher keeps an inherited switch out of a server's environment
(tests/unit/test_server_launcher.py). Skipped where arctic-inference is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("arctic_inference") is None
    or importlib.util.find_spec("vllm") is None,
    reason="arctic-inference or vLLM is not installed (scripts/install.sh builds it)",
)

# vLLM's own loader, as each vLLM process calls it; prints what it loaded and what changed.
_LOAD = """
import json, os, sys
from vllm.plugins import load_general_plugins, load_plugins_by_group
before = dict(os.environ)
load_general_plugins()
loaded = sorted(load_plugins_by_group("vllm.general_plugins"))
changed = sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k))
print("RESULT " + json.dumps({"loaded": loaded, "env_changed": changed}))
"""


def _load(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ARCTIC_", "VLLM_PLUGINS"))}
    return subprocess.run(
        [sys.executable, "-c", _LOAD],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=clean | env,
    )


def test_the_plugin_loads_and_changes_nothing_without_the_switch() -> None:
    done = _load()
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert "arctic_inference" in result["loaded"]  # vLLM finds it, and runs it at every start
    # Enabled, it sets VLLM_USE_V2_MODEL_RUNNER=0 and announces itself before patching vLLM.
    assert result["env_changed"] == []
    assert "Arctic Inference plugin is enabled" not in done.stderr


def test_the_switch_makes_every_vllm_process_refuse_the_cpu_build() -> None:
    done = _load(ARCTIC_INFERENCE_ENABLED="1")
    assert done.returncode != 0
    assert "Arctic Inference plugin requires the cuda platform" in done.stderr
