"""Start, watch and stop real vLLM servers.

- `ServerSpec` / `SpeculativeSpec`: what to start, validated like vLLM validates it; renders
  the launch argv and the `vllm serve ...` line a user pastes.
- `Launcher.launch(spec)` -> `ServerHandle`: ready server with its `StartupFacts`; raises
  `tuner.server.failures.StartupFailed` carrying a classified `StartupFailure`.
- `classify`, `parse_log`, `parse_cache_info`: the log and /metrics readers, usable alone.
- `reap_orphans(state_dir)`: stop server groups left behind by a killed tuner.
"""

from tuner.server.facts import merge_facts, parse_cache_info, parse_log, parse_metric_labels
from tuner.server.failures import FailureKind, StartupFailure, classify
from tuner.server.handle import ServerHandle
from tuner.server.launcher import Launcher, free_port
from tuner.server.reaper import reap_orphans
from tuner.server.spec import (
    EAGLE_STYLE,
    NEEDS_DRAFT,
    ServerSpec,
    SpeculativeMethod,
    SpeculativeSpec,
)

__all__ = [
    "EAGLE_STYLE",
    "NEEDS_DRAFT",
    "FailureKind",
    "Launcher",
    "ServerHandle",
    "ServerSpec",
    "SpeculativeMethod",
    "SpeculativeSpec",
    "StartupFailure",
    "classify",
    "free_port",
    "merge_facts",
    "parse_cache_info",
    "parse_log",
    "parse_metric_labels",
    "reap_orphans",
]
