"""The fake vLLM server's interface, which other tests (workload, study) rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tuner.server import Launcher, ServerHandle, ServerSpec, parse_cache_info
from tuner.settings import LaunchCommand

FAKE = LaunchCommand((sys.executable, "-m", "tuner.testing.fake_vllm"))


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("fake")
    launcher = Launcher(log_dir=root / "logs", state_dir=root / "run", launch_command=FAKE)
    spec = ServerSpec(model="fake-model", served_model_name="fake", env={"FAKE_VLLM_SPEC": "1"})
    with launcher.launch(spec, timeout_s=30) as handle:
        yield handle


def _counters(handle: ServerHandle) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in httpx.get(f"{handle.base_url}/metrics").text.splitlines():
        if line.startswith("vllm:") and "_total{" in line and "position=" not in line:
            values[line.split("{", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return values


def _chat(handle: ServerHandle, content: str, **extra: object) -> dict[str, object]:
    body = {"model": "fake", "messages": [{"role": "user", "content": content}], **extra}
    response = httpx.post(f"{handle.base_url}/v1/chat/completions", json=body)
    response.raise_for_status()
    return dict(response.json())


def test_models_lists_the_served_name(fake: ServerHandle) -> None:
    data = httpx.get(f"{fake.base_url}/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["fake"]
    assert data[0]["root"] == "fake-model"


def test_forced_length_and_counters(fake: ServerHandle) -> None:
    before = _counters(fake)
    prompt = "x" * 400
    reply = _chat(fake, prompt, max_tokens=7, ignore_eos=True)
    choices = reply["choices"]
    assert isinstance(choices, list)
    assert choices[0]["message"]["content"].split() == [f"tok{i}" for i in range(7)]
    usage = reply["usage"]
    assert isinstance(usage, dict)
    assert usage["completion_tokens"] == 7
    assert usage["prompt_tokens"] == 100
    after = _counters(fake)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 7
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 100
    assert after["vllm:spec_decode_num_drafts_total"] > before["vllm:spec_decode_num_drafts_total"]


def test_repeated_prompt_hits_the_cache_in_whole_blocks(fake: ServerHandle) -> None:
    prefix = "shared policy text. " * 40  # 800 chars = 200 tokens
    first = _chat(fake, prefix + "first question")
    second = _chat(fake, prefix + "second question")
    assert isinstance(first["usage"], dict) and isinstance(second["usage"], dict)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == 192  # 200 shared tokens, in 16-token blocks
    assert first["usage"]["completion_tokens"] == 6  # the short fixed reply


def test_streaming_with_usage(fake: ServerHandle) -> None:
    body = {
        "model": "fake",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 5,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = []
    with httpx.stream("POST", f"{fake.base_url}/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "tok0 tok1 tok2 tok3 tok4"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5


def test_cache_config_info_matches_the_logged_size(fake: ServerHandle) -> None:
    info = parse_cache_info(httpx.get(f"{fake.base_url}/metrics").text)
    assert info.kv_cache_tokens == fake.facts.kv_cache_tokens == 12345
    assert info.num_gpu_blocks == 12345 // 16


def test_fail_text_exits_1() -> None:
    result = subprocess.run(
        [*FAKE.argv, "model", "--port", "1"],
        env={"FAKE_VLLM_FAIL": "ValueError: nope", "FAKE_VLLM_STARTUP_S": "0", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == "ValueError: nope"
