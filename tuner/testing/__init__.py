"""Test support: fakes that stand in for services, and helpers that share real ones.

- `tuner.testing.fake_vllm`: a stand-in vLLM API server, run as
  `python -m tuner.testing.fake_vllm --model M --port P` (see its docstring).
- `ServerPool`: at most one real vLLM server at a time, reused while tests ask for an equal
  spec (the `vllm_pool` fixture of tests/integration).
- `cpu_dtype_args`: the dtype the tests' real CPU servers run in on this CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.server import Launcher, ServerHandle, ServerSpec

__all__ = ["ServerPool", "cpu_dtype_args"]


def cpu_dtype_args(cpuinfo: str | None = None) -> tuple[str, ...]:
    """`("--dtype", "float32")` on a CPU without bf16 instructions, else `()` (the model's
    bf16): `tuner.server.cpu.cpu_dtype` as command-line words, for scripts that build a
    server's argv themselves (a `ServerSpec` takes `dtype=cpu_dtype()`).

    Args:
        cpuinfo: The text of /proc/cpuinfo (read when None; no file: no flags).
    """
    from tuner.server.cpu import cpu_dtype

    dtype = cpu_dtype(cpuinfo)
    return ("--dtype", dtype) if dtype else ()


class ServerPool:
    """At most one real server at a time, reused while callers ask for the same spec.

    Args:
        launcher: Starts the servers.
        timeout_s: Startup timeout for each start.
    """

    def __init__(self, launcher: Launcher, *, timeout_s: float = 600.0) -> None:
        self.launcher = launcher
        self.timeout_s = timeout_s
        self.starts = 0
        self._current: ServerHandle | None = None

    def get(self, spec: ServerSpec) -> ServerHandle:
        """A ready server for `spec`: the running one if equal and alive, else a new start.

        Raises:
            tuner.server.failures.StartupFailed: The new server did not start.
        """
        current = self._current
        if current is not None and current.spec == spec and current.alive():
            return current
        self.stop()
        self._current = self.launcher.launch(spec, timeout_s=self.timeout_s)
        self.starts += 1
        return self._current

    def stop(self) -> None:
        """Stop the running server, if any (call it before starting a server of your own)."""
        if self._current is not None:
            current, self._current = self._current, None
            current.stop()
