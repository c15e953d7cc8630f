"""Crash summaries name the root cause, checked on real vLLM logs (tests/assets/logs/).

Each log ends with something else than its cause: vLLM's wrapper ("Engine core initialization
failed. See root cause above"), a re-raise, pydantic's link, or resource_tracker warnings at
shutdown. The summary must carry the exception type and message of the failing process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.server import FailureKind, classify
from tuner.server.crashes import root_cause, server_death

LOGS = Path(__file__).parent.parent / "assets" / "logs"

# (asset, failure class, what the summary must say)
CASES = [
    ("cpu-bad-model-path.log", FailureKind.CRASHED,
     "HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
     "'/nonexistent/model-dir'"),
    ("cpu-bad-flag-value.log", FailureKind.CRASHED,
     "error: argument --kv-cache-dtype: invalid choice: 'fp3'"),
    ("cpu-bad-parser.log", FailureKind.CRASHED,
     "KeyError: 'invalid tool call parser: nosuchparser"),
    ("cpu-max-model-len-too-big.log", FailureKind.CRASHED,
     "ValidationError: 1 validation error for ModelConfig Value error, User-specified "
     "max_model_len (100000) is greater than the derived max_model_len"),
    ("cpu-kv-too-small.log", FailureKind.CONTEXT_TOO_LONG,
     "To serve at least one request with the model's max seq len (8192)"),
    ("gpu-mamba-blocks-exceeded.log", FailureKind.MAMBA_BLOCKS_EXCEEDED,
     "max_num_seqs (512) exceeds available Mamba cache blocks (195)"),
]  # fmt: skip


@pytest.mark.parametrize(("asset", "kind", "cause"), CASES)
def test_summary_names_the_root_cause_not_the_last_line(
    asset: str, kind: FailureKind, cause: str
) -> None:
    text = (LOGS / asset).read_text()
    last = text.strip().splitlines()[-1].strip()
    failure = classify(text, 1, False, log_path=str(LOGS / asset))
    summary = failure.summary()
    assert failure.kind is kind
    assert cause in summary, summary
    assert "\n" not in summary
    if cause not in last:  # the naive summary (the last line) would have missed it
        assert last not in summary
    assert "resource_tracker" not in summary and "See root cause above" not in summary


def test_the_engine_cores_cause_beats_the_api_servers_wrapper() -> None:
    text = (LOGS / "cpu-kv-too-small.log").read_text()
    assert text.strip().splitlines()[-1].strip().startswith("warnings.warn('resource_tracker")
    cause = root_cause(text)
    assert cause is not None and cause.startswith("ValueError: To serve at least one request")


def test_a_server_killed_from_outside_says_so() -> None:
    death = server_death("INFO: started\n", -9, 12, log_path="x.log")
    assert (death.kind, death.infeasible) == ("server_crashed", False)
    assert death.reason == (
        "the vLLM server died during the workload after 12 answered requests (killed by "
        "SIGKILL): no error in its log: it was killed from outside (the OOM killer, or a user)"
    )


def test_a_real_gpu_engine_death_names_the_cuda_error_not_the_wrapper() -> None:
    # vLLM 0.26.0 on an H200: the tiny hybrid with MTP depth 3 died in its first decode step
    # with drafts; the API server's EngineDeadError lines and shutdown messages come last.
    text = (LOGS / "gpu-mtp-illegal-memory-access.log").read_text()
    death = server_death(text, 0, 0)
    cause = "AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert (death.kind, death.infeasible) == ("server_died", True)
    assert death.reason.endswith(cause), death.reason
    assert "EngineDeadError" not in death.reason


def test_a_server_dead_at_its_first_request_is_infeasible() -> None:
    pre = "(EngineCore_DP0 pid=7) ERROR 11-30 10:00:00 [core.py:1] "
    log = (
        f"{pre}Traceback (most recent call last):\n"
        f'{pre}  File "x.py", line 1, in f\n'
        f"{pre}TypeError: 'function' object is not subscriptable\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.\n"
    )
    death = server_death(log, 1, 0)
    assert (death.kind, death.infeasible) == ("server_died", True)
    assert death.reason == (
        "the vLLM server died at its first request (exit status 1): TypeError: 'function' "
        "object is not subscriptable"
    )
