"""Time-to-ready of the same vLLM server started bare and through `tuner.server.Launcher`.

The bare way is what a script would do: `Popen` in a new session, poll `/health` until 200.
The launcher adds the pid file, the orphan reaping, the log and /metrics facts. One warm-up
start fills vLLM's compile cache first; then the two ways alternate (which goes first flips
each round) so that cache and page-cache effects fall on both. Prints each start's
time-to-ready and stop time, and the ratio launcher/direct of the medians (goal: <= 1.05).

    flock /tmp/tuner-vllm.lock python benchmarks/startup_overhead.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from tuner.models import prepare
from tuner.server import Launcher, ServerSpec, free_port
from tuner.server.reaper import group_members
from tuner.settings import get_settings


def start_direct(spec: ServerSpec, log_dir: Path) -> tuple[float, float]:
    """Start bare, wait for /health 200; return (seconds to ready, seconds to stop)."""
    port = free_port()
    argv = spec.argv(get_settings().launch_command(), port)
    began = time.monotonic()
    with open(log_dir / f"direct-{port}.log", "ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    with httpx.Client(timeout=5.0) as client:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"direct start exited with {process.returncode}")
            try:
                if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    ready = time.monotonic() - began
    stopping = time.monotonic()
    os.killpg(process.pid, signal.SIGTERM)
    process.wait()
    while group_members(process.pid):
        time.sleep(0.05)
    return ready, time.monotonic() - stopping


def start_launcher(spec: ServerSpec, launcher: Launcher) -> tuple[float, float]:
    """Start through the launcher (facts included); return (seconds to ready, seconds to stop)."""
    began = time.monotonic()
    handle = launcher.launch(spec, timeout_s=900)
    ready = time.monotonic() - began
    return ready, handle.stop()


def main() -> None:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="starts of each kind")
    parser.add_argument("--kv-bytes", type=int, default=1_000_000_000)
    args = parser.parse_args()

    cache = Path(os.environ.get("TUNER_TEST_CACHE", Path.home() / ".cache" / "tuner-test"))
    model = prepare("smollm2-135m", cache)
    spec = ServerSpec(model=str(model), kv_cache_memory_bytes=args.kv_bytes)
    log_dir = Path(tempfile.mkdtemp(prefix="startup-overhead-"))
    launcher = Launcher(log_dir=log_dir, state_dir=log_dir / "run")
    print(f"model {model}\nlogs  {log_dir}\ncommand {spec.serve_command()}")

    warm_ready, _ = start_direct(spec, log_dir)
    print(f"warm-up (direct): ready in {warm_ready:.2f} s")
    results: dict[str, list[tuple[float, float]]] = {"direct": [], "launcher": []}
    for round_ in range(args.rounds):
        order = ["direct", "launcher"] if round_ % 2 == 0 else ["launcher", "direct"]
        for way in order:
            if way == "direct":
                result = start_direct(spec, log_dir)
            else:
                result = start_launcher(spec, launcher)
            results[way].append(result)
            print(f"round {round_ + 1} {way:8s}: ready {result[0]:6.2f} s, stop {result[1]:5.2f} s")

    direct = statistics.median(r for r, _ in results["direct"])
    through = statistics.median(r for r, _ in results["launcher"])
    print(f"median ready: direct {direct:.2f} s, launcher {through:.2f} s")
    print(f"ratio launcher/direct: {through / direct:.3f} (goal <= 1.05)")
    print(
        "median stop: direct "
        f"{statistics.median(s for _, s in results['direct']):.2f} s, launcher "
        f"{statistics.median(s for _, s in results['launcher']):.2f} s"
    )


if __name__ == "__main__":
    main()
