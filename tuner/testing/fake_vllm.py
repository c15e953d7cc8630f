"""A fake vLLM server: the OpenAI endpoints, /health and /metrics, answering instantly.

Run it like the real API server (unknown vLLM flags are accepted and ignored):

    python -m tuner.testing.fake_vllm --model M --port P [--host H] [--served-model-name N]
        [--max-num-seqs K] [--max-model-len L] [...]

It stands in for vLLM where a real start costs a minute or cannot happen on this machine (the
Mamba-block failure needs a GPU). Behaviour is chosen by environment variables:

- `FAKE_VLLM_STARTUP_S` (default 0.5): seconds to "build the engine" before listening (half
  "loading the model", half "warming up", each announced by vLLM's own log line).
- `FAKE_VLLM_KV_TOKENS` (default 12345): the KV cache size it reports (log and /metrics).
- `FAKE_VLLM_SPEC_KV_TOKENS`: the KV cache size a server started with `--speculative-config`
  reports instead (a drafter's smaller cache). `--num-gpu-blocks-override N` reports N blocks
  of `BLOCK_SIZE` tokens, as vLLM does.
- `FAKE_VLLM_MAMBA_BLOCKS=N`: when max-num-seqs (default 512, as on a GPU) exceeds N, fail
  the way vLLM does on a hybrid model with CUDA graphs, and exit 1.
- `FAKE_VLLM_FAIL=text`: print `text` to stderr and exit 1.
- `FAKE_VLLM_SPEC=1`: count speculative drafts, as a server with a speculative config would.
- `FAKE_VLLM_TOKEN_DELAY_S` (default 0): seconds per output token before answering (a slow
  server, for pruning tests).
- `FAKE_VLLM_DRIFT` (default 0) with `FAKE_VLLM_DRIFT_FILE=path`: a machine that drifts. Each
  start counts itself in the file (n starts before it) and divides its token delay by
  exp(DRIFT x n): every server serves a constant share faster than the one started before it.
- `FAKE_VLLM_PREFILL_DELAY_S` (default 0): seconds per prompt token not served from its prefix
  cache, before answering (a slow CPU's prefill; tuner's calibration probe measures it).
- `FAKE_VLLM_LOGPROBS_DELAY_S` (default 0): seconds before answering a request that asks for
  `logprobs` (tuner's correctness probe does; the workload does not), so a test can find a
  trial in its probe.
- `FAKE_VLLM_BENCHMARK_DELAY_S` (default 0): seconds before answering each request of tuner's
  plain benchmark (its system message is "Request <hex>."), so a test can find a trial in it.
- `FAKE_VLLM_ACCESS_LOG=1`: log every request as vLLM's uvicorn does (fault tests read phases).
- `FAKE_VLLM_SPEC_SPEEDUP` (default 1): a server started with `--speculative-config` divides
  that delay by this (a speculative config that is faster).
- `FAKE_VLLM_CHANGE_OUTPUTS=1`: a server started with `--speculative-config` answers greedy
  requests differently after the first word, as a lossy speculative config would (the
  correctness probe must flag it).
- `FAKE_VLLM_FLIP_NEAR_TIES=1`: a server started with `--speculative-config` answers the
  runner-up at the reply's near-tie (`NEAR_TIE_POSITION`, where the top two tokens are
  `NEAR_TIE_MARGIN` nats apart) and goes its own way after it, as rounding that flips a near-tie
  does (the probe must NOT flag it).
- `FAKE_VLLM_CHANGE_CLEAR_TOKEN=1`: a server started with `--speculative-config` answers another
  token at `CLEAR_POSITION`, where the top token leads by `CLEAR_MARGIN` nats, as a broken
  speculative config would (the probe must flag it).

Requests with `logprobs` get the top `top_logprobs` tokens per output word, the same for every
prompt: the reply's own word first, then a runner-up `CLEAR_MARGIN` nats behind
(`NEAR_TIE_MARGIN` at `NEAR_TIE_POSITION`); tokens are named "token_id:N" under
`return_tokens_as_token_ids`.

Failures vLLM showed under load (issue 24), each after `N` chat requests answered normally:

- `FAKE_VLLM_500_AFTER=N`: the engine core "dies": its traceback goes to the log
  (`FAKE_VLLM_ENGINE_ERROR`, default a RuntimeError), every later chat request answers HTTP 500
  ("EngineCore encountered an issue"), and the server exits 1 a second later
  (`FAKE_VLLM_EXIT_DELAY_S`), as vLLM's API server does after its engine died.
- `FAKE_VLLM_HANG_AFTER=N`: stays healthy (/health, /metrics answer) but later chat requests
  never answer: generation stopped.
- `FAKE_VLLM_CUDA_EXIT0_AFTER=N`: the next chat request gets no answer; the log gets vLLM's
  "torch.AcceleratorError: CUDA error: an illegal memory access was encountered" traceback and
  the process exits with status 0 (vLLM #53726).
- `FAKE_VLLM_ACCEPT_COLLAPSE_AFTER=N` (with a speculative config): drafts keep being counted but
  no draft token is accepted any more (acceptance falls to 0% and stays there, as in vLLM
  #52873 and #52756).

Non-streaming answers carry `token_ids` when the request sets `return_token_ids` (vLLM's
field): one stable id per word.

Answers are words ("tok0 tok1 ..."): with `max_tokens` and `ignore_eos` exactly `max_tokens`
of them, else a short fixed reply. Token counts are characters / 4 for prompts and one per word
for completions; the /metrics counters add up what was really served. Only the standard
library is imported, so it is ready in well under a second.

This module holds the HTTP routes and the start; the server's state and /metrics are in
`tuner.testing.fake_vllm_state`, its answers (words, log-probabilities, token ids) in
`tuner.testing.fake_vllm_answers`, and the failures it plays in `tuner.testing.fake_vllm_faults`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tuner.testing.fake_vllm_answers import (
    FIXED_REPLY,
    logprobs,
    prompt_text,
    tie_modes,
    word_id,
)
from tuner.testing.fake_vllm_faults import (
    CUDA_ERROR,
    after,
    engine_dies,
    failure_mode,
    mamba_failure,
)
from tuner.testing.fake_vllm_state import State

__all__ = ["main"]

VERSION = "0.32.0"
DEFAULT_MAX_NUM_SEQS = 512
DEFAULT_MAX_MODEL_LEN = 8192


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fake_vllm", add_help=True)
    parser.add_argument("model_positional", nargs="?", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS)
    parser.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    parser.add_argument("--speculative-config", default=None)
    parser.add_argument("--num-gpu-blocks-override", type=int, default=None)
    args, _ignored = parser.parse_known_args(argv)
    args.model = args.model or args.model_positional or "fake-model"
    args.served_model_name = args.served_model_name or args.model
    return args


def _make_handler(state: State) -> type[BaseHTTPRequestHandler]:  # noqa: C901 (a route each)
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            # vLLM logs each request at INFO; keep the fake's log short instead, unless a
            # test reads the phases of a trial from it (FAKE_VLLM_ACCESS_LOG=1, uvicorn's form).
            if os.environ.get("FAKE_VLLM_ACCESS_LOG") == "1" and format.startswith('"%s"'):
                request, code = args[0], args[1]
                sys.stderr.write(f'INFO:     {self.client_address[0]} - "{request}" {code}\n')
                sys.stderr.flush()

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            self._send(status, json.dumps(payload).encode(), "application/json")

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b"", "text/plain")
            elif path == "/v1/models":
                model = {
                    "id": state.args.served_model_name,
                    "object": "model",
                    "owned_by": "vllm",
                    "root": state.args.model,
                    "max_model_len": state.args.max_model_len,
                }
                self._json(200, {"object": "list", "data": [model]})
            elif path == "/metrics":
                self._send(200, state.metrics_text().encode(), "text/plain; version=0.0.4")
            elif path == "/version":
                self._json(200, {"version": VERSION})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            path = self.path.split("?", 1)[0]
            if path == "/reset_prefix_cache":
                with state.seen_lock:
                    state.seen_prompts.clear()
                self._send(200, b"", "text/plain")
                return
            if path != "/v1/chat/completions":
                self._json(404, {"detail": "Not Found"})
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._json(400, {"error": {"message": "invalid JSON", "code": 400}})
                return
            self._chat(body)

        def _chat(self, body: dict[str, Any]) -> None:
            n = state.next_chat()
            mode = failure_mode(n)
            if mode == "500":
                engine_dies(
                    os.environ.get("FAKE_VLLM_ENGINE_ERROR")
                    or f"RuntimeError: the fake engine core died at request {n} "
                    "(FAKE_VLLM_500_AFTER)"
                )
                delay = float(os.environ.get("FAKE_VLLM_EXIT_DELAY_S", "1"))
                threading.Timer(delay, os._exit, args=(1,)).start()
                message = (
                    "EngineCore encountered an issue. See stack trace (above) for the root cause."
                )
                self._json(500, {"error": {"message": message, "code": 500}})
                return
            if mode == "hang":
                threading.Event().wait()  # never answers; /health and /metrics still do
            if mode == "cuda-exit0":
                engine_dies(CUDA_ERROR)
                os._exit(0)
            prompt = prompt_text(body)
            # FAKE_VLLM_DIE_IN_PLAIN_BENCHMARK=1: the engine dies at the plain benchmark's first
            # request (its system message is "Request <hex>."), after the agent workload.
            if os.environ.get("FAKE_VLLM_DIE_IN_PLAIN_BENCHMARK") and prompt.startswith("Request "):
                os._exit(1)
            prompt_tokens = max(1, len(prompt) // 4)
            cached = min(state.cached_tokens(prompt), prompt_tokens)
            max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
            if max_tokens and body.get("ignore_eos"):
                words = [f"tok{i}" for i in range(int(max_tokens))]
            else:
                words = FIXED_REPLY.split()
                if state.changes_outputs:
                    words = words[:1] + [f"changed{i}" for i in range(len(words) - 1)]
                words = tie_modes(bool(state.args.speculative_config), words)
                if max_tokens:
                    words = words[: int(max_tokens)]
            completion_tokens = len(words)
            # A slow "GPU": each request takes this long per output token (whole-request delay
            # keeps the fake simple; tests use it to make one server clearly lose).
            prefill_delay = float(os.environ.get("FAKE_VLLM_PREFILL_DELAY_S", "0"))
            probe_delay = float(os.environ.get("FAKE_VLLM_LOGPROBS_DELAY_S", "0"))
            benchmark_delay = float(os.environ.get("FAKE_VLLM_BENCHMARK_DELAY_S", "0"))
            time.sleep(
                completion_tokens * state.token_delay_s
                + (prompt_tokens - cached) * prefill_delay
                + (probe_delay if body.get("logprobs") else 0.0)
                + (benchmark_delay if prompt.startswith("Request ") else 0.0)
            )
            drafts = completion_tokens if state.spec else 0
            collapse = after("FAKE_VLLM_ACCEPT_COLLAPSE_AFTER")
            accepted = 0 if collapse is not None and n > collapse else drafts // 2
            state.counters.add(
                prompt_tokens=prompt_tokens,
                generation_tokens=completion_tokens,
                prefix_cache_queries=prompt_tokens,
                prefix_cache_hits=cached,
                prompt_tokens_cached=cached,
                request_success=1,
                spec_decode_num_drafts=drafts,
                spec_decode_num_draft_tokens=drafts,
                spec_decode_num_accepted_tokens=accepted,
            )
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            ident = f"chatcmpl-{uuid.uuid4().hex}"
            model = body.get("model") or state.args.served_model_name
            common = {"id": ident, "created": int(time.time()), "model": model}
            if body.get("stream"):
                self._stream(common, words, usage, body)
                return
            text = " ".join(words)
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "finish_reason": "length" if body.get("ignore_eos") else "stop",
            }
            if body.get("return_token_ids"):
                choice["token_ids"] = [word_id(w) for w in words]
            if body.get("logprobs"):
                choice["logprobs"] = logprobs(words, body)
            self._json(
                200, {**common, "object": "chat.completion", "choices": [choice], "usage": usage}
            )

        def _stream(
            self,
            common: dict[str, Any],
            words: list[str],
            usage: dict[str, Any],
            body: dict[str, Any],
        ) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def event(choices: list[dict[str, Any]], **extra: Any) -> None:
                chunk = {**common, "object": "chat.completion.chunk", "choices": choices, **extra}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            event([{"index": 0, "delta": {"role": "assistant", "content": ""}}])
            for i, word in enumerate(words):
                event([{"index": 0, "delta": {"content": word if i == 0 else " " + word}}])
            finish = "length" if body.get("ignore_eos") else "stop"
            event([{"index": 0, "delta": {}, "finish_reason": finish}])
            if (body.get("stream_options") or {}).get("include_usage"):
                event([], usage=usage)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def _fail(text: str) -> int:
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the fake server until SIGTERM/SIGINT; return the exit status."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    print(f"INFO [api_server.py] vLLM API server version {VERSION}", flush=True)
    print(f"INFO [api_server.py] args: model={args.model!r} port={args.port}", flush=True)
    # The start-up phases in vLLM's words (tuner.server.startup_log.startup_phase reads them).
    startup_s = float(os.environ.get("FAKE_VLLM_STARTUP_S", "0.5"))
    print(f"INFO [cpu_model_runner.py] Starting to load model {args.model}...", flush=True)
    time.sleep(startup_s / 2)
    print("INFO [cpu_model_runner.py] Warming up model for the compilation...", flush=True)
    time.sleep(startup_s / 2)

    failure = os.environ.get("FAKE_VLLM_FAIL")
    if failure:
        return _fail(failure)
    mamba_blocks = os.environ.get("FAKE_VLLM_MAMBA_BLOCKS")
    if mamba_blocks and args.max_num_seqs > int(mamba_blocks):
        return _fail(mamba_failure(args.max_num_seqs, int(mamba_blocks)))

    state = State(args)
    concurrency = state.kv_tokens / args.max_model_len
    for line in (
        "Model loading took 0.50 GiB memory and 0.100000 seconds",
        "Available KV cache memory: 1.23 GiB",
        f"GPU KV cache size: {state.kv_tokens:,} tokens, Maximum concurrency for "
        f"{args.max_model_len:,} tokens per request: {concurrency:.2f}x",
        "init engine (profile, create kv cache, warmup model) took 0.20 s",
    ):
        print(f"INFO [fake_vllm] {line}", flush=True)

    server = ThreadingHTTPServer((args.host, args.port), _make_handler(state))
    server.daemon_threads = True

    def stop(signum: int, frame: object) -> None:
        # shutdown() blocks until serve_forever returns, so it must run off the main thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"INFO [launcher] Starting vLLM server on http://{args.host}:{args.port}", flush=True)
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
