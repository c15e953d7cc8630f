"""Bad input, table-driven: every preset field is checked as vLLM would check it, in one line.

Each case mutates the shipped CPU preset in one place, writes it as YAML and loads it. The
error must name the file with the line and column of the offending key, the field's dotted
path, and say what is wrong. Through the CLI, the same files give exactly one line on stderr,
exit code 2, no traceback, and no database file.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.errors import ConfigError
from tuner.study.space import load_preset, preset_dir

BASE = yaml.safe_load((preset_dir() / "smollm2-135m" / "cpu.yaml").read_text())
GPU_BASE = yaml.safe_load((preset_dir() / "qwen3.8-27b" / "rtx4090.yaml").read_text())


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    *parents, leaf = dotted.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return out


_DELETE = object()

# (preset, key to set, value, where the error points, words the error must contain)
CASES: list[tuple[str, str, Any, str, str]] = [
    ("cpu", "space.max_num_seqs", [0, 8], "space.max_num_seqs.0", "greater than 0"),
    ("cpu", "space.max_num_seqs", [4], "(top level)",
     "baseline.max_num_seqs (8) is not among space.max_num_seqs [4]"),
    ("cpu", "space.max_num_seqs", [], "space.max_num_seqs", "at least 1"),
    ("cpu", "space.max_num_seqs", [4, "many"], "space.max_num_seqs.1", "integer"),
    ("cpu", "space.kv_cache_memory_bytes", [0], "space.kv_cache_memory_bytes.0", "greater than"),
    ("cpu", "space.kv_cache_memory_bytes", [-5], "space.kv_cache_memory_bytes.0", "greater than"),
    ("cpu", "space.num_speculative_tokens", {"low": 0, "high": 3},
     "space.num_speculative_tokens", "low must be >= 1"),
    ("cpu", "space.num_speculative_tokens", {"low": 3, "high": 1},
     "space.num_speculative_tokens", "high (1) must be >= low (3)"),
    ("cpu", "space.num_speculative_tokens", {"low": 1, "high": 3, "step": 0},
     "space.num_speculative_tokens.step", "greater than or equal to 1"),
    ("cpu", "space.prompt_lookup_min", {"low": 0, "high": 2},
     "space.prompt_lookup_min", "low must be >= 1"),
    ("cpu", "space.prompt_lookup_max", {"low": 0, "high": 2},
     "space.prompt_lookup_max", "low must be >= 1"),
    ("cpu", "space.prompt_lookup_min", {"low": 1, "high": 9},
     "space", "prompt_lookup_min <= prompt_lookup_max"),
    ("cpu", "space.methods", [], "space.methods", "at least 1"),
    ("cpu", "space.methods", ["none", "none"], "space.methods", "twice"),
    ("cpu", "space.methods", ["none", "medusa"], "space.methods.1", "'ngram'"),
    ("cpu", "space.methods", ["none", "mtp"], "(top level)", "MTP layers"),
    ("cpu", "space.methods", ["none", "eagle"], "(top level)", "draft_models.eagle"),
    ("cpu", "space.max_num_seq", [4], "space.max_num_seq", "Extra inputs"),
    ("cpu", "space.gpu_memory_utilization", {"low": 0.5, "high": 0.9},
     "(top level)", "CPU preset searches kv_cache_memory_bytes"),
    ("gpu", "space.gpu_memory_utilization", {"low": 0.5, "high": 1.2},
     "space.gpu_memory_utilization", "(0, 1]"),
    ("gpu", "space.gpu_memory_utilization", {"low": 0.0, "high": 0.9},
     "space.gpu_memory_utilization", "(0, 1]"),
    ("gpu", "space.gpu_memory_utilization", {"low": 0.9, "high": 0.5},
     "space.gpu_memory_utilization", "high (0.5) must be >= low (0.9)"),
    ("gpu", "baseline.gpu_memory_utilization", 1.5, "baseline.gpu_memory_utilization",
     "less than or equal to 1"),
    ("gpu", "gpu.tensor_parallel_size", 2, "gpu", "tensor_parallel_size (2)"),
    ("gpu", "gpu.memory_gib", -24, "gpu.memory_gib", "greater than 0"),
    ("cpu", "baseline.max_num_seqs", 0, "baseline.max_num_seqs", "greater than 0"),
    ("cpu", "baseline.kv_cache_memory_bytes", 0, "baseline.kv_cache_memory_bytes", "greater"),
    ("cpu", "gpu.count", 0, "gpu.count", "greater than or equal to 1"),
    ("cpu", "model.max_model_len", 0, "model.max_model_len", "greater than 0"),
    ("cpu", "model.mtp_layers", -1, "model.mtp_layers", "greater than or equal to 0"),
    ("cpu", "model.checkpoint", _DELETE, "model.checkpoint", "Field required"),
    ("cpu", "workload.tasks", 0, "workload.tasks", "greater than or equal to 1"),
    ("cpu", "workload.agents", 0, "workload.agents", "greater than or equal to 1"),
    ("cpu", "workload.warmup_tasks", -1, "workload.warmup_tasks", "greater than or equal to 0"),
    ("cpu", "workload.task_deadline_s", 0, "workload.task_deadline_s", "greater than 0"),
    ("cpu", "workload.mode", "batch", "workload.mode", "'live' or 'replay'"),
    ("cpu", "workload.shape.max_context_tokens", 9000, "(top level)",
     "max_context_tokens (9000) exceeds model.max_model_len (8192)"),
    ("cpu", "startup_timeout_s", 0, "startup_timeout_s", "greater than 0"),
    ("cpu", "throughput_streams", [0], "throughput_streams.0", "greater than 0"),
    ("cpu", "throughput_requests", 0, "throughput_requests", "greater than or equal to 1"),
]  # fmt: skip


def _write(tmp_path: Path, data: Any, name: str = "preset.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _key_line(text: str, dotted: str) -> int | None:
    """1-based line of the deepest key of `dotted` present in `text` (by indentation walk)."""
    line_no, indent = None, -1
    lines = text.splitlines()
    start = 0
    for key in (k for k in dotted.split(".") if not k.isdigit()):
        for i in range(start, len(lines)):
            stripped = lines[i].lstrip()
            depth = len(lines[i]) - len(stripped)
            if depth > indent and stripped.startswith(f"{key}:"):
                line_no, indent, start = i + 1, depth, i + 1
                break
        else:
            break
    return line_no


@pytest.mark.parametrize(("preset", "key", "value", "where", "words"), CASES)
def test_bad_preset_field_is_one_line_naming_file_line_and_field(
    tmp_path: Path, preset: str, key: str, value: Any, where: str, words: str
) -> None:
    base = BASE if preset == "cpu" else GPU_BASE
    path = _write(tmp_path, _set(base, key, value))
    with pytest.raises(ConfigError) as err:
        load_preset(space=path)
    line = str(err.value)
    assert "\n" not in line
    assert f": {where}: " in line, line
    assert words in line, line
    found = re.match(rf"{re.escape(str(path))}:(\d+):(\d+): ", line)
    assert found is not None, line
    if where != "(top level)":
        expected = _key_line(path.read_text(), where)
        assert expected is not None
        assert int(found.group(1)) >= expected, line  # the key, or the list item under it


@pytest.mark.parametrize(
    ("text", "line", "col", "words"),
    [
        ("model:\n  name: x\n\tcheckpoint: y\n", 3, 1, "'\\t'"),
        ("space:\n  methods: [none, ngram\nworkload: {}\n", 3, 9, "expected ',' or ']'"),
        ("model: {name: x\n", 2, 1, "expected ',' or '}'"),
        ("a: b: c\n", 1, 5, "mapping values are not allowed"),
        ("model:\n  - a\n  b: 1\n", 3, 3, "expected <block end>"),
    ],
)
def test_yaml_syntax_error_is_one_line_with_file_line_col(
    tmp_path: Path, text: str, line: int, col: int, words: str
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_preset(space=path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}:{col}: not valid YAML: "), message
    assert words in message, message


def test_not_a_mapping_and_missing_file(tmp_path: Path) -> None:
    path = _write(tmp_path, ["a", "list"])
    with pytest.raises(ConfigError, match="a preset is a mapping"):
        load_preset(space=path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_preset(space=tmp_path / "nope.yaml")


def _tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "TUNER_CACHE_DIR": str(cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("space.max_num_seqs", [0, 8], "space.max_num_seqs.0"),
        ("space.prompt_lookup_min", {"low": 1, "high": 9}, "prompt_lookup_min <= "),
        ("workload.tasks", 0, "workload.tasks"),
    ],
)
def test_cli_bad_preset_exits_2_in_one_line_and_writes_nothing(
    tmp_path: Path, key: str, value: Any, words: str
) -> None:
    path = _write(tmp_path, _set(BASE, key, value))
    db = tmp_path / "never.db"
    proc = _tuner("optimize", "--space", str(path), "--storage", f"sqlite:///{db}", cwd=tmp_path)
    line = _one_line(proc)
    assert words in line and str(path) in line
    assert not db.exists()


def test_cli_yaml_error_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  name: x\n\tcheckpoint: y\n")
    line = _one_line(_tuner("optimize", "--space", str(path), cwd=tmp_path))
    assert f"{path}:3:1: not valid YAML" in line


@pytest.mark.parametrize(
    "args",
    [
        ("optimize", "--model", "smollm2-135m", "--gpu", "cpu", "--n-trials", "0"),
        ("optimize", "--model", "smollm2-135m", "--gpu", "tpu"),
        ("optimize", "--model", "smollm2-135m", "--gpu", "cpu", "--mode", "batch"),
        ("export", "--storage", "postgresql://bob:hunter2@127.0.0.1:1/x"),
        ("report", "--storage", "postgresql://bob:hunter2@127.0.0.1:1/x"),
        ("db", "upgrade", "--storage", "sqlite:////proc/no/such/dir/x.db"),
        ("workload", "run", "--url", "http://127.0.0.1:1", "--model", "m", "--tasks", "1"),
    ],
)
def test_cli_errors_are_one_line_without_secrets(tmp_path: Path, args: tuple[str, ...]) -> None:
    line = _one_line(_tuner(*args, cwd=tmp_path))
    assert "hunter2" not in line
    assert not list(tmp_path.glob("*.db"))
