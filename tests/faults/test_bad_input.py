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
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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


# The held-out style of check: bad input across every command, as a new user types it. Each
# case runs the real CLI in a sandbox of its own (cwd, cache, XDG data home holding the default
# storage, a copy of a sample study) and must answer one line on stderr starting "error: " with
# the words given, exit 2, print nothing on stdout, show no traceback and no password, and leave
# the sandbox exactly as it was. Placeholders: {d} the sandbox, {S} its sample study's URL,
# {M} a missing SQLite file in it, {PG} a Postgres URL with a password and nothing listening.
PG = "postgresql://bob:hunter2@127.0.0.1:1/x"
SECRET = "hunter2"
OPT = ("optimize", "--model", "smollm2-135m", "--gpu", "cpu")
WRUN = ("workload", "run", "--url", "http://127.0.0.1:1", "--model", "m")
TABLE: dict[str, tuple[tuple[str, ...], str]] = {
    # optimize: storage first (before Ray or a model), then the preset and options
    "optimize-storage-not-a-url": ((*OPT, "--storage", "notaurl"),
                                   "storage URL 'notaurl' is not a database URL"),
    "optimize-sqlite-dir-missing": ((*OPT, "--storage", "sqlite:////nonexistent-dir/x/y.db"),
                                    "the directory /nonexistent-dir/x of SQLite storage"),
    "optimize-postgres-down": ((*OPT, "--storage", PG), "cannot open storage "
                               "postgresql://bob:***@127.0.0.1:1/x"),
    "optimize-mysql": ((*OPT, "--storage", "mysql://u@127.0.0.1/x"), "is a mysql database"),
    "optimize-sqlite-in-memory": ((*OPT, "--storage", "sqlite://"), "names no SQLite file"),
    "optimize-sqlite-is-a-dir": ((*OPT, "--storage", "sqlite:///{d}/adir"), "is a directory"),
    "optimize-not-sqlite": ((*OPT, "--storage", "sqlite:///{d}/notes.txt"),
                            "is not a SQLite database"),
    "optimize-cache-is-a-file": ((*OPT, "--storage", "{M}", "--cache-dir", "{d}/afile"),
                                 "cache directory {d}/afile"),
    "optimize-unknown-model": (("optimize", "--model", "nosuch", "--gpu", "cpu"),
                               "no preset for --model nosuch --gpu cpu"),
    "optimize-unknown-gpu": (("optimize", "--model", "smollm2-135m", "--gpu", "tpu"), "tpu"),
    "optimize-no-gpu": (("optimize", "--model", "smollm2-135m"), "give --model and --gpu"),
    "optimize-n-trials-0": ((*OPT, "--n-trials", "0"), "'--n-trials'"),
    "optimize-tasks-0": ((*OPT, "--tasks", "0"), "'--tasks'"),
    "optimize-timeout-0": ((*OPT, "--timeout", "0"), "'--timeout'"),
    "optimize-seed-word": ((*OPT, "--seed", "x"), "'--seed'"),
    "optimize-baseline-every-negative": ((*OPT, "--baseline-every", "-1"), "'--baseline-every'"),
    "optimize-baseline-every-word": ((*OPT, "--baseline-every", "x"), "'--baseline-every'"),
    "optimize-mode": ((*OPT, "--mode", "batch"), "must be live or replay"),
    "optimize-confirm-word": ((*OPT, "--confirm", "two"), "--confirm 'two': give K,R"),
    "optimize-space-missing": (("optimize", "--space", "{d}/nope.yaml"), "does not exist"),
    "optimize-space-not-yaml": (("optimize", "--space", "{d}/broken.yaml"),
                                "{d}/broken.yaml:1:5: not valid YAML"),
    "optimize-ray-down": ((*OPT, "--storage", "{M}", "--ray-address", "127.0.0.1:1"),
                          "no Ray cluster answers at 127.0.0.1:1"),
    "optimize-unknown-option": (("optimize", "--frobnicate"), "No such option: --frobnicate"),
    # confirm
    "confirm-db-missing": (("confirm", "--study", "s", "--storage", "{M}"), "no database at"),
    "confirm-no-such-study": (("confirm", "--study", "nosuch", "--storage", "{S}"),
                              "no study named 'nosuch'"),
    "confirm-bad-plan": (("confirm", "--study", "sample", "--storage", "{S}", "--confirm",
                          "1,2,3"), "--confirm '1,2,3'"),
    "confirm-postgres-down": (("confirm", "--study", "s", "--storage", PG), "bob:***@"),
    # explain
    "explain-no-such-study": (("explain", "--study", "nosuch", "--storage", "{S}"),
                              "no study named 'nosuch'"),
    "explain-no-such-trial": (("explain", "--study", "sample", "--trial", "999", "--storage",
                               "{S}"), "has no trial 999"),
    "explain-db-missing": (("explain", "--study", "s", "--storage", "{M}"), "no database at"),
    # sweep
    "sweep-agents": (("sweep", "--study", "sample", "--storage", "{S}", "--agents", "0,x"),
                     "--agents '0,x'"),
    "sweep-schedule": (("sweep", "--study", "sample", "--storage", "{S}", "--schedule-given",
                        "abc"), "--schedule-given 'abc'"),
    "sweep-no-such-study": (("sweep", "--study", "nosuch", "--storage", "{S}"),
                            "no study named 'nosuch'"),
    "sweep-top-0": (("sweep", "--study", "sample", "--storage", "{S}", "--top", "0"), "'--top'"),
    "sweep-db-missing": (("sweep", "--study", "s", "--storage", "{M}"), "no database at"),
    "sweep-out-is-a-file": (("sweep", "--study", "sample", "--storage", "{S}", "--out",
                             "{d}/afile"), "output directory {d}/afile"),
    # export
    "export-db-missing": (("export", "--storage", "{M}"), "no database at {d}/missing.db"),
    "export-no-such-study": (("export", "--study", "nosuch", "--storage", "{S}"),
                             "no study named 'nosuch'"),
    "export-format": (("export", "--storage", "{S}", "--format", "pdf"), "'--format'"),
    "export-postgres-down": (("export", "--storage", PG), "bob:***@"),
    "export-postgres-from-env": (("env:TUNER_STORAGE=" + PG, "export"), "bob:***@"),
    "export-not-sqlite": (("export", "--storage", "sqlite:///{d}/notes.txt"),
                          "is not a SQLite database"),
    # report
    "report-db-missing": (("report", "--storage", "{M}"), "no database at"),
    "report-out-is-a-file": (("report", "--storage", "{S}", "--out", "{d}/afile"),
                             "report directory {d}/afile"),
    "report-no-such-study": (("report", "--study", "nosuch", "--storage", "{S}"),
                             "no study named 'nosuch'"),
    "report-postgres-down": (("report", "--storage", PG), "bob:***@"),
    # dashboard
    "dashboard-port-0": (("dashboard", "--storage", "{S}", "--port", "0"), "'--port'"),
    "dashboard-port-70000": (("dashboard", "--storage", "{S}", "--port", "70000"), "'--port'"),
    "dashboard-db-missing": (("dashboard", "--storage", "{M}"), "no database at"),
    "dashboard-postgres-down": (("dashboard", "--storage", PG), "bob:***@"),
    # models
    "models-unknown": (("models", "prepare", "gpt-17"), "unknown test model 'gpt-17'"),
    "models-cache-is-a-file": (("models", "prepare", "smollm2-135m", "--cache-dir", "{d}/afile"),
                               "{d}/afile"),
    "models-no-such-command": (("models", "frob"), "No such command 'frob'"),
    # db
    "db-upgrade-dir-missing": (("db", "upgrade", "--storage", "sqlite:////proc/no/such/dir/x.db"),
                               "the directory /proc/no/such/dir of SQLite storage"),
    "db-current-not-a-url": (("db", "current", "--storage", "notaurl"), "not a database URL"),
    "db-upgrade-postgres-down": (("db", "upgrade", "--storage", PG), "bob:***@"),
    "db-upgrade-not-sqlite": (("db", "upgrade", "--storage", "sqlite:///{d}/notes.txt"),
                              "is not a SQLite database"),
    # workload and bench
    "workload-server-down": ((*WRUN, "--tasks", "1"),
                             "cannot reach the vLLM server at http://127.0.0.1:1"),
    "workload-url-not-a-url": (("workload", "run", "--url", "notaurl", "--model", "m"),
                               "cannot reach the vLLM server at notaurl"),
    "workload-mode": ((*WRUN, "--mode", "batch"), "mode"),
    "workload-request-options": ((*WRUN, "--request-options", "{bad"),
                                 "--request-options is not JSON"),
    "workload-traces-missing": ((*WRUN, "--traces", "{d}/none.jsonl"),
                                "cannot read traces file {d}/none.jsonl"),
    "workload-agents-0": ((*WRUN, "--agents", "0"), "agents"),
    "workload-describe-shape": (("workload", "describe", "--shape", "huge"),
                                "unknown shape 'huge'"),
    "workload-describe-tasks-0": (("workload", "describe", "--tasks", "0"), "tasks"),
    "bench-streams-0": (("bench", "throughput", "--url", "http://127.0.0.1:1", "--model", "m",
                         "--streams", "0"), "--streams must be at least 1, not 0"),
    "bench-server-down": (("bench", "throughput", "--url", "http://127.0.0.1:1", "--model", "m"),
                          "cannot reach the vLLM server"),
    "no-such-command": (("frobnicate",), "No such command 'frobnicate'"),
}  # fmt: skip


@dataclass(frozen=True)
class _Ran:
    proc: subprocess.CompletedProcess[str]
    sandbox: Path
    before: dict[str, tuple[int, int]]
    after: dict[str, tuple[int, int]]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time."""
    out = {}
    for p in root.rglob("*"):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size if p.is_file() else -1, st.st_mtime_ns)
    return out


def _sandbox(root: Path, name: str, sample: Path) -> Path:
    box = root / name
    box.mkdir()
    (box / "adir").mkdir()
    (box / "afile").write_text("a file, not a directory\n")
    (box / "notes.txt").write_text("notes, not a database\n")
    (box / "broken.yaml").write_text("a: b: c\n")
    for part in sample.parent.glob(f"{sample.name}*"):  # the study and any WAL beside it
        shutil.copy2(part, box / part.name)
    return box


def _run_case(root: Path, name: str, sample: Path) -> _Ran:
    box = _sandbox(root, name, sample)
    args, _ = TABLE[name]
    env = {**os.environ, "COLUMNS": "200", "TUNER_CACHE_DIR": str(box / "cache"),
           "XDG_DATA_HOME": str(box / "data")}  # fmt: skip
    env.pop("TUNER_STORAGE", None)
    argv = []
    for arg in args:
        if arg.startswith("env:"):
            key, _, value = arg[4:].partition("=")
            env[key] = value
            continue
        argv.append(
            arg.replace("{d}", str(box))
            .replace("{S}", f"sqlite:///{box / sample.name}")
            .replace("{M}", f"sqlite:///{box / 'missing.db'}")
        )
    before = _files(box)
    proc = subprocess.run(
        [sys.executable, "-m", "tuner.cli", *argv],
        capture_output=True, text=True, env=env, cwd=box, timeout=120,
    )  # fmt: skip
    return _Ran(proc, box, before, _files(box))


@pytest.fixture(scope="module")
def table_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, _Ran]:
    """Runs the selected cases of TABLE, three at a time (each is a fresh interpreter)."""
    from tuner.testing.sample import write_sample_study

    root = tmp_path_factory.mktemp("bad-input")
    sample = root / "template" / "sample.db"
    sample.parent.mkdir()
    write_sample_study(f"sqlite:///{sample}")
    wanted = [
        item.callspec.params["name"]  # type: ignore[attr-defined]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_bad_input_table"
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = pool.map(lambda name: (name, _run_case(root, name, sample)), wanted)
        return dict(runs)


@pytest.mark.parametrize("name", list(TABLE))
def test_bad_input_table(table_runs: dict[str, _Ran], name: str) -> None:
    ran = table_runs[name]
    proc, box = ran.proc, ran.sandbox
    words = TABLE[name][1].replace("{d}", str(box))
    everything = proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, everything
    assert "Traceback" not in everything
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert proc.stdout.strip() == "", proc.stdout
    assert words in lines[0], lines[0]
    assert SECRET not in everything
    assert ran.after == ran.before, "written: " + ", ".join(
        sorted(k for k in {*ran.before, *ran.after} if ran.before.get(k) != ran.after.get(k))
    )


def test_the_table_covers_every_command() -> None:
    commands = {next(a for a in args if not a.startswith("env:")) for args, _ in TABLE.values()}
    assert {"optimize", "confirm", "explain", "sweep", "export", "report", "dashboard", "models",
            "db", "workload", "bench"} <= commands  # fmt: skip
    assert len(TABLE) >= 40
