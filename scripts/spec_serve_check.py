"""Does the installed vLLM serve speculative decoding under these settings? Several servers at once.

Written for vLLM 0.26.0's MTP crash on the tiny hybrid under CUDA graphs (docs/gpu-validation.md):
each case is one `vllm serve` of the same model with its own flags, all started together on
127.0.0.1; once a case's server is ready it gets 4 and then 16 chat requests at once (every
request generates `--max-tokens` tokens, `ignore_eos`), and one line per case says whether it
answered, how fast, how many tokens were drafted, and whether the server is still alive. Each
server's log is kept in `--out`; every server's process group is killed at the end.

    python scripts/spec_serve_check.py --model /path/to/tiny-hybrid-mtp --out /tmp/probe
    python scripts/spec_serve_check.py --model M --out D --common "--load-format dummy" \
        --case "d1=--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":1}'"

A case's flags are split as a shell would split them (quote the JSON, as above). Without
`--case`, the four cases of docs/gpu-validation.md's next GPU run are probed. Run it from the
repository (tuner importable): the vLLM command is tuner's (`TUNER_VLLM_COMMAND`, else `vllm serve`
where that works), and ports and /metrics are read as tuner reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from tuner.metrics.prometheus import SPEC_DRAFT_TOKENS, parse_metrics
from tuner.server.launcher import free_port
from tuner.settings import LaunchCommand, get_settings


def _spec(depth: int, **extra: object) -> str:
    config = {"method": "mtp", "num_speculative_tokens": depth, **extra}
    return f"--speculative-config {shlex.quote(json.dumps(config))}"


DEFAULT_CASES = {
    "d1-noasync-kv64-seqs16": f"{_spec(1)} --no-async-scheduling "
    "--kv-cache-memory-bytes 64000000 --max-num-seqs 16",
    "d3-noasync-kv64-seqs16": f"{_spec(3)} --no-async-scheduling "
    "--kv-cache-memory-bytes 64000000 --max-num-seqs 16",
    "d3-nopadded-kv64-seqs16": f"{_spec(3, disable_padded_drafter_batch=True)} "
    "--kv-cache-memory-bytes 64000000 --max-num-seqs 16",
    "d1-noasync-kv16-seqs195": f"{_spec(1)} --no-async-scheduling "
    "--kv-cache-memory-bytes 16000000 --max-num-seqs 195",
}
DEFAULT_COMMON = (
    "--load-format dummy --gdn-prefill-backend triton --max-cudagraph-capture-size 64 "
    "--no-enable-prefix-caching --max-model-len 4096 --gpu-memory-utilization 0.15"
)


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http://127.0.0.1 only)
        return str(response.read().decode())


def _chat(port: int, max_tokens: int, results: list[int | str]) -> None:
    body = {
        "model": "probe",
        "messages": [{"role": "user", "content": "Tell me a long story about a fox."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 (127.0.0.1)
            results.append(int(json.loads(response.read())["usage"]["completion_tokens"]))
    except Exception as exc:  # any failure is this request's outcome, reported as such
        results.append(f"{type(exc).__name__}: {str(exc)[:100]}")


def _burst(port: int, n: int, max_tokens: int) -> str:
    results: list[int | str] = []
    threads = [threading.Thread(target=_chat, args=(port, max_tokens, results)) for _ in range(n)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - start
    tokens = sum(r for r in results if isinstance(r, int))
    errors = [r for r in results if isinstance(r, str)]
    line = f"{n}x{max_tokens}: {n - len(errors)}/{n} answered, {tokens} tokens in {seconds:.1f} s"
    line += f" ({tokens / seconds:.0f} tokens/s)"
    return line + (f", first error {errors[0]}" if errors else "")


def _drafted(port: int) -> str:
    try:
        total = parse_metrics(_get(f"http://127.0.0.1:{port}/metrics", 5)).total(SPEC_DRAFT_TOKENS)
    except Exception:
        return "?"
    return "?" if total is None else f"{total:.0f}"


def _probe(
    name: str,
    port: int,
    proc: subprocess.Popen[bytes],
    ready_timeout: float,
    max_tokens: int,
    lines: dict[str, str],
) -> None:
    start = time.monotonic()
    while True:
        if proc.poll() is not None:
            lines[name] = f"exited with {proc.returncode} before it was ready"
            return
        try:
            _get(f"http://127.0.0.1:{port}/health", 2)
            break
        except Exception:
            if time.monotonic() - start > ready_timeout:
                lines[name] = f"not ready within {ready_timeout:.0f} s"
                return
            time.sleep(2)
    ready = time.monotonic() - start
    few = _burst(port, 4, max_tokens)
    many = _burst(port, 16, max_tokens * 2) if proc.poll() is None else "-"
    alive = "alive" if proc.poll() is None else f"exited with {proc.returncode}"
    lines[name] = f"ready in {ready:.0f} s | {few} | {many} | drafted {_drafted(port)} | {alive}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="model directory or name to serve")
    parser.add_argument("--out", type=Path, required=True, help="where logs and probe.txt go")
    parser.add_argument("--vllm", help="command that starts vLLM (default: tuner's)")
    parser.add_argument("--common", default=DEFAULT_COMMON, help="flags every case gets")
    parser.add_argument("--case", action="append", default=[], help="NAME=FLAGS (repeatable)")
    parser.add_argument("--ready-timeout", type=float, default=330.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    cases = dict(c.split("=", 1) for c in args.case) if args.case else DEFAULT_CASES
    args.out.mkdir(parents=True, exist_ok=True)
    procs: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    launch = LaunchCommand.parse(args.vllm) if args.vllm else get_settings().launch_command()
    model = [args.model] if launch.model_positional else ["--model", args.model]
    for name, flags in cases.items():
        port = free_port()
        argv_ = [
            *launch.argv,
            *model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--served-model-name",
            "probe",
            *shlex.split(args.common),
            *shlex.split(flags),
        ]
        log = (args.out / f"probe-{name}.log").open("wb")
        log.write((shlex.join(argv_) + "\n").encode())
        log.flush()
        procs[name] = (
            port,
            subprocess.Popen(argv_, stdout=log, stderr=subprocess.STDOUT, start_new_session=True),
        )
    lines: dict[str, str] = {}
    threads = [
        threading.Thread(
            target=_probe, args=(n, p, proc, args.ready_timeout, args.max_tokens, lines)
        )
        for n, (p, proc) in procs.items()
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for _, proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    report = "".join(f"{name}: {lines.get(name, '?')}\n" for name in cases)
    (args.out / "probe.txt").write_text(report)
    sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
