"""`tuner.server`'s public surface is exactly `__all__` (other parts import only these)."""

from __future__ import annotations

import inspect

import tuner.server


def test_public_surface() -> None:
    # Submodules show up as attributes once anything imported them (supervisor, capabilities
    # ...), so the surface is the package's non-module names.
    public = {
        name
        for name in dir(tuner.server)
        if not name.startswith("_") and not inspect.ismodule(getattr(tuner.server, name))
    }
    assert public == set(tuner.server.__all__)
    assert set(tuner.server.__all__) == {
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
    }
