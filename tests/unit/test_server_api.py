"""`tuner.server`'s public surface is exactly `__all__` (other parts import only these)."""

from __future__ import annotations

import tuner.server


def test_public_surface() -> None:
    public = {name for name in dir(tuner.server) if not name.startswith("_")}
    submodules = {"crashes", "facts", "failures", "knobs", "launcher", "reaper", "spec"}
    assert public - submodules == set(tuner.server.__all__)
    assert set(tuner.server.__all__) == {
        "SPECULATIVE_METHODS",
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
    }
