"""benchmarks/ci_timing.py: what one vLLM log says a server did, and the projection."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import ci_timing

# The shape of a real log of vLLM 0.32's CPU build as tuner writes it (trimmed): launched at
# 03:38:40 (the file name), stamped lines from 03:38:52, uvicorn's unstamped "startup complete"
# right after the 03:39:36 line, then two 10-second stats lines and the shutdown.
STATS = (
    "(APIServer pid=1) INFO 12-03 {} [loggers.py:335] Engine 000: Avg prompt throughput: "
    "{} tokens/s, Avg generation throughput: {} tokens/s, Running: 2 reqs"
)
LOG = f"""\
Triton is installed, but doesn't include CPU backend. Disabling Triton.
(APIServer pid=1) INFO 12-03 03:38:52 [api_utils.py:347] version 0.32.0
(EngineCore pid=2) INFO 12-03 03:39:10 [core.py:133] Initializing a V1 LLM engine
(APIServer pid=1) INFO 12-03 03:39:36 [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:1
INFO:     Started server process [1]
INFO:     Application startup complete.
{STATS.format("03:39:46", 500.0, 20.0)}
{STATS.format("03:39:56", 100.0, 30.0)}
(APIServer pid=1) INFO 12-03 03:40:16 [launcher.py:1] Shutting down
INFO:     Application shutdown complete.
"""


def _log(
    tmp_path: Path, text: str, name: str = "vllm-20261203-033840-7404-1-p34747-a0.log"
) -> Path:
    path = tmp_path / name
    path.write_text(text)
    os.utime(path, (1796270000, 1796270000))  # a mtime in 2026, the year the stamps lack
    return path


def test_a_log_gives_start_busy_idle_and_tokens(tmp_path: Path) -> None:
    got = ci_timing.read_log(_log(tmp_path, LOG))
    assert got == {
        "start_s": 56.0,  # 03:38:40 launch to 03:39:36 ready
        "busy_s": 20.0,  # two 10 s stats intervals with tokens
        "idle_s": 20.0,  # 03:39:36 -> 03:40:16 is 40 s, 20 of them busy
        "prompt_tokens": 6000.0,  # 10 s x 500 + 10 s x 100
        "generated_tokens": 500.0,  # 10 s x 20 + 10 s x 30
    }


def test_without_the_launch_stamp_the_start_counts_from_the_first_stamped_line(
    tmp_path: Path,
) -> None:
    got = ci_timing.read_log(_log(tmp_path, LOG, name="vllm-server.log"))
    assert got is not None and got["start_s"] == 44.0  # 03:38:52 -> 03:39:36


def test_a_server_that_never_got_ready_is_not_counted(tmp_path: Path) -> None:
    never = "\n".join(line for line in LOG.splitlines() if "startup complete" not in line)
    assert ci_timing.read_log(_log(tmp_path, never)) is None


def test_the_projection_takes_each_part_at_the_target_s_speed() -> None:
    # Two servers, 10,000 prompt and 1,000 generated tokens, 600 s of the rest, on a box
    # that starts in 50 s, prefills 500 tok/s and decodes 100 tok/s, installs in 100 s.
    here = {"start_s": 50.0, "prefill_tok_s": 500.0, "decode_tok_s": 100.0, "install_s": 100.0}
    servers = [
        {"start_s": 50.0, "busy_s": 20.0, "idle_s": 0.0, "prompt_tokens": 5000.0,
         "generated_tokens": 500.0},
    ] * 2  # fmt: skip
    parts = ci_timing.split(servers, total_s=100.0 + 20.0 + 10.0 + 600.0, rates=here)
    assert parts["rest_s"] == 600.0  # 730 - 2 x 50 starts - 20 s prefill - 10 s decode
    target = {"start_s": 125.0, "prefill_tok_s": 50.0, "decode_tok_s": 25.0, "install_s": 200.0}
    # 2 x 125 + 10,000 / 50 + 1,000 / 25 + 600 x 2 = 250 + 200 + 40 + 1,200
    assert ci_timing.project(parts, here, target) == 1690.0
