"""`tuner export`: which trial, why, and every format parses back to the same argv."""

from __future__ import annotations

import configparser
import json
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tuner.cli import main
from tuner.errors import StudyError
from tuner.results import choose_export, load_results, render_export, serve_argv
from tuner.results.export_render import FORMATS
from tuner.results.formats import systemd_quote
from tuner.testing.sample import SAMPLE_MODEL, SampleScore, write_sample_study

NGRAM_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 5,
}


def _study(tmp: Path, name: str, ngram: SampleScore) -> str:
    url = f"sqlite:///{tmp / f'{name}.db'}"
    write_sample_study(url, ngram=ngram)
    return url


@pytest.fixture(scope="module")
def winning_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """n-gram beats the baseline (752 [730, 770]) beyond both intervals."""
    return _study(tmp_path_factory.mktemp("export"), "win", SampleScore(900.0, 850.0, 950.0))


@pytest.fixture(scope="module")
def overlapping_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """n-gram scores higher (800 vs 752), but its tasks take 6, 10 and 14 s against the
    baseline's 10, 10, 10: paired by task, the ratio's interval reaches below 1."""
    url = f"sqlite:///{tmp_path_factory.mktemp('export') / 'overlap.db'}"
    write_sample_study(url, ngram=SampleScore(800.0, 760.0, 840.0), ngram_task_s=(6.0, 10.0, 14.0))
    return url


def _commands(text: str) -> list[str]:
    """The shell text without comments and line continuations, as argv."""
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    return shlex.split(body.replace("\\\n", " "))


def _spec_config(argv: list[str]) -> dict[str, object]:
    return dict(json.loads(argv[argv.index("--speculative-config") + 1]))


def test_a_config_that_wins_beyond_the_intervals_is_exported(winning_url: str) -> None:
    choice = choose_export(load_results(winning_url))
    assert choice.trial.number == 1 and not choice.fell_back
    assert choice.verdict is not None and choice.verdict.paired is not None
    # 900 / 752 paired over the same 3 tasks (9, 10, 11 s against 10, 10, 10).
    assert choice.verdict.paired.ratio == pytest.approx(900 / 752)
    assert choice.verdict.paired.low > 1.0
    assert "beats the baseline (no speculation): paired tasks/h ratio" in choice.reason
    # No confirmation ran: one round, judged with the between-run term, and said so.
    assert choice.reason.startswith("unconfirmed: #1 beats") and not choice.confirmed
    assert "between-run term" in choice.reason
    text = render_export(choice)
    argv = _commands(text)
    assert argv[:3] == ["vllm", "serve", SAMPLE_MODEL]
    assert _spec_config(argv) == NGRAM_CONFIG
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "2000000000"
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "# completed tasks/h: 900 [850, 950]" in text
    assert "# baseline (no speculation, #0): 752 [730, 770]" in text
    assert "KV cache tokens: 27,405; prompt tokens from the cache: 61%" in text


def test_a_config_inside_the_baselines_interval_falls_back(overlapping_url: str) -> None:
    choice = choose_export(load_results(overlapping_url))
    assert choice.fell_back
    assert (choice.trial.number, choice.best.number) == (0, 1)
    assert choice.verdicts[1].paired is not None
    assert choice.verdicts[1].paired.low < 1.0 < choice.verdicts[1].paired.high
    assert "it is not faster beyond the noise (Holm-corrected over 1 config judged): " in (
        choice.reason
    )
    text = render_export(choice)
    argv = _commands(text)
    assert "--speculative-config" not in argv
    assert "# why this one: unconfirmed: the best config, #1 (n-gram depth 3" in text
    doc = json.loads(render_export(choice, "json"))
    assert (doc["measured"]["trial"], doc["best"]["trial"]) == (0, 1)
    assert doc["best"]["interval"] == [760.0, 840.0]


def test_the_baseline_wins_outright(tmp_path: Path) -> None:
    choice = choose_export(load_results(_study(tmp_path, "lose", SampleScore(648, 620, 680))))
    assert choice.trial.number == 0 and not choice.fell_back
    assert choice.reason.startswith("unconfirmed: no speculation (the baseline, #0) did the most")


def test_a_memory_only_change_must_also_beat_the_baseline(overlapping_url: str) -> None:
    results = load_results(overlapping_url)
    base, ngram = results.trials[:2]
    bigger_kv = replace(ngram, params={**base.params, "kv_cache_memory_bytes": 3_000_000_000})
    choice = choose_export(replace(results, trials=(base, bigger_kv)))
    assert choice.fell_back and choice.trial.number == 0
    assert choice.reason.endswith("the baseline's default settings are the simpler server")


def test_controls_are_never_exported(tmp_path: Path) -> None:
    # The control (#5, 467 tasks/h) beats a bad n-gram trial; the baseline still wins, and the
    # control is never a candidate even when it scores highest.
    results = load_results(_study(tmp_path, "ctl", SampleScore(100, 90, 110)))
    assert choose_export(results).trial.number == 0
    only_control = type(results)(
        results.study_name, results.storage, None, None, (results.trials[5],)
    )
    with pytest.raises(StudyError, match="no completed feasible trial to export yet"):
        choose_export(only_control)


def test_shell_export_runs_through_bash_unchanged(winning_url: str, tmp_path: Path) -> None:
    choice = choose_export(load_results(winning_url))
    script = tmp_path / "serve.sh"
    # A stand-in `vllm` prints the argv bash handed it: the real shell's quoting is the test.
    script.write_text(
        'vllm() { python3 -c "import json, sys; print(json.dumps(sys.argv[1:]))" "$@"; }\n'
        + render_export(choice)
    )
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
    assert ["vllm", *json.loads(out.stdout)] == serve_argv(choice.trial)
    assert serve_argv(choice.trial) == shlex.split(choice.trial.serve_command or "")


def test_json_and_yaml_carry_argv_and_measurements(winning_url: str) -> None:
    choice = choose_export(load_results(winning_url))
    doc = json.loads(render_export(choice, "json"))
    assert yaml.safe_load(render_export(choice, "yaml")) == doc
    assert doc["argv"] == serve_argv(choice.trial)
    assert shlex.split(doc["command"]) == doc["argv"]
    assert _spec_config(doc["argv"]) == NGRAM_CONFIG
    measured = doc["measured"]
    assert {k: measured[k] for k in list(measured)[:9]} == {
        "trial": 1,
        "config": "n-gram depth 3 (lookup 2-5), KV 2.00 GB, max seqs 8",
        "completed_tasks_per_hour": 900.0,
        "interval": [850.0, 950.0],
        "completed": 3,  # replay: tasks complete, nobody grades them
        "tasks": 3,
        "kv_cache_tokens": 27405,
        "prompt_tokens_from_cache_pct": pytest.approx(61.0),
        "preemptions": 2,
    }
    assert (doc["mode"], doc["mode_note"]) == ("replay", "load shape: answers not graded")
    assert measured["confirmation_runs"] == 0 and measured["changes_outputs"] is False
    assert measured["paired_ratio_to_baseline"]["ratio"] == pytest.approx(900 / 752)
    assert doc["baseline"]["completed_tasks_per_hour"] == 752.0
    assert "best" not in doc


def _unsystemd(line: str) -> list[str]:
    # Every argument here is plain or single-quoted without backslashes, where systemd's
    # splitting equals POSIX's; specifiers (%%) and variables ($$) are unescaped after.
    return [a.replace("%%", "%").replace("$$", "$") for a in shlex.split(line)]


def test_systemd_unit_parses_and_execs_the_same_argv(winning_url: str) -> None:
    choice = choose_export(load_results(winning_url))
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(render_export(choice, "systemd"))
    assert parser.sections() == ["Unit", "Service", "Install"]
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    exec_start = _unsystemd(parser["Service"]["ExecStart"])
    assert exec_start == ["/usr/bin/env", *serve_argv(choice.trial)]


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("--max-num-seqs", "--max-num-seqs"),
        ("/models/a b", "'/models/a b'"),
        ("50%", "50%%"),
        ('{"x": "$HOME"}', """'{"x": "$$HOME"}'"""),
        ("it's", '"it\'s"'),
        ('a\\"b c', '"a\\\\\\"b c"'),
    ],
)
def test_systemd_quote(arg: str, quoted: str) -> None:
    assert systemd_quote(arg) == quoted


# vLLM's docker/Dockerfile, final stage `vllm-openai`: ENTRYPOINT ["vllm", "serve"]. Written
# out here rather than imported, so a wrong constant in the exporter cannot pass its own test.
VLLM_OPENAI_ENTRYPOINT = ["vllm", "serve"]


def test_compose_service_runs_the_image_with_the_same_arguments(winning_url: str) -> None:
    results = load_results(winning_url)
    # The preset's environment rides in front of the command, as on the CPU preset; a device
    # pin from the measuring machine must not travel into a container.
    trial = replace(
        results.trials[1],
        serve_command="CUDA_VISIBLE_DEVICES=1 VLLM_USE_AOT_COMPILE=0 "
        + (results.trials[1].serve_command or ""),
    )
    choice = choose_export(replace(results, trials=(results.trials[0], trial)))
    doc = yaml.safe_load(render_export(choice, "compose"))
    service = doc["services"]["vllm"]
    assert service["image"] == "vllm/vllm-openai:v0.32.0"
    assert service["environment"] == {"VLLM_USE_AOT_COMPILE": "0"}
    # What the container runs: the image's entrypoint followed by `command:`.
    runs = [*VLLM_OPENAI_ENTRYPOINT, *service["command"]]
    expected = shlex.split(results.trials[1].serve_command or "")
    expected[expected.index("--host") + 1] = "0.0.0.0"
    assert runs == expected
    assert runs[2] == SAMPLE_MODEL and "serve" not in service["command"]
    assert service["ports"] == ["127.0.0.1:8000:8000"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]


def test_shell_export_adds_the_command_that_ran_on_this_install(winning_url: str) -> None:
    results = load_results(winning_url)
    launched = (
        "VLLM_USE_AOT_COMPILE=0",
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        SAMPLE_MODEL,
        "--port",
        "41234",
        "--max-num-seqs",
        "8",
    )
    trial = replace(results.trials[1], launched=launched)
    text = render_export(choose_export(replace(results, trials=(results.trials[0], trial))))
    portable, _, here = text.partition("# on the install that measured it")
    assert _commands(portable)[:3] == ["vllm", "serve", SAMPLE_MODEL]
    assert _commands(here.split("\n", 1)[1]) == [
        "VLLM_USE_AOT_COMPILE=0",
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        SAMPLE_MODEL,
        "--max-num-seqs",
        "8",
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_format_carries_the_measuring_slots_gpu_pin(winning_url: str, fmt: str) -> None:
    # A GPU trial's recorded command starts with its slot's CUDA_VISIBLE_DEVICES (the H200 run
    # exported `CUDA_VISIBLE_DEVICES=0 vllm serve ...`); the preset's own environment stays.
    results = load_results(winning_url)
    trial = replace(
        results.trials[1],
        serve_command="CUDA_VISIBLE_DEVICES=1 VLLM_USE_AOT_COMPILE=0 "
        + (results.trials[1].serve_command or ""),
        launched=("CUDA_VISIBLE_DEVICES=1", "/venv/bin/python", "-m", "vllm.x", "--model", "m"),
    )
    text = render_export(choose_export(replace(results, trials=(results.trials[0], trial))), fmt)
    assert "CUDA_VISIBLE_DEVICES" not in text
    assert "VLLM_USE_AOT_COMPILE" in text


def test_cli_export_prints_each_format(
    winning_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in FORMATS:
        with pytest.raises(SystemExit) as info:
            main(["export", "--storage", winning_url, "--format", fmt])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert out == render_export(choose_export(load_results(winning_url)), fmt)


def test_cli_export_rejects_an_unknown_format(
    winning_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["export", "--storage", winning_url, "--format", "toml"])
    assert info.value.code == 2
    assert "toml" in capsys.readouterr().err


def test_cli_export_without_a_study_lists_the_studies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    write_sample_study(url, study_name="alpha")
    write_sample_study(url, study_name="beta")
    with pytest.raises(SystemExit) as info:
        main(["export", "--storage", url])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "choose one with --study: alpha, beta" in err
    assert "Traceback" not in err
