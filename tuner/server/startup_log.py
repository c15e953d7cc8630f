"""Reading a starting vLLM server's log: the start-up phase it names last, and the log's tail.

`startup_phase` maps vLLM's own words (0.32, CPU and GPU builds) to the phase a person reading
the progress lines needs ("loading weights", "compiling", ...); `log_tail` reads the end of a
log that grows while the server starts. `tuner.server.launcher` tells both to `on_wait` while
it waits for `/health`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["log_tail", "startup_phase"]

_TAIL_BYTES = 65536

# vLLM's start-up, in the words of its own log (0.32, CPU and GPU builds), each mapped to what a
# person reading the progress lines needs: the phase the server is in. The last line that
# matches any of them in the log wins.
_PHASES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), phase)
    for pattern, phase in (
        (r"non-default args|Resolved architecture", "reading the model's config"),
        (r"Initializing a V1 LLM engine", "starting the engine"),
        (r"Starting to load model|Loading weights|Loading safetensors", "loading weights"),
        (r"Model loading took", "weights loaded"),
        (r"Starting torch\.compile|Dynamo bytecode transform|Compiling a graph", "compiling"),
        (r"Directly load the compiled graph", "loading the compile cache"),
        (r"torch\.compile takes|compilation takes", "compiled"),
        (r"Available KV cache memory|for KV cache|KV cache size", "sizing the KV cache"),
        (r"Warming up model", "warm-up: compiling for the batch shapes"),
        (r"Warming up done", "warm-up done"),
        (r"Capturing CUDA graph|Graph capturing", "capturing CUDA graphs"),
        (r"init engine \(profile", "engine ready, starting the API server"),
        (r"Starting vLLM (?:API )?server|Application startup complete", "API server starting"),
    )
)


def startup_phase(log_text: str) -> str | None:
    """The phase a starting vLLM server is in, from its log so far (None: none named yet)."""
    best: tuple[int, str] | None = None
    for pattern, phase in _PHASES:
        for match in pattern.finditer(log_text):
            if best is None or match.start() > best[0]:
                best = (match.start(), phase)
    return best[1] if best is not None else None


def log_tail(path: Path) -> str:
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - _TAIL_BYTES))
            return log.read().decode(errors="replace")
    except OSError:
        return ""
