"""One rule for naming a study, in every command that reads one, on real SQLite files.

The only study is used when there is one; several (and no --study) are one line that lists them,
exit 2; an empty storage and an unknown name are one line, exit 2. No test here starts a server:
each command is stopped by what its study lacks, after the name was chosen, and says so.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tuner.attrs import StudyAttr
from tuner.cli import main
from tuner.study.space import load_preset
from tuner.testing.sample import write_sample_study


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def _bare_study(url: str, name: str) -> None:
    """A study with its preset stored and no trial (as `tuner optimize` leaves one at first)."""
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    study.set_user_attr(StudyAttr.PRESET, json.loads(preset.model_dump_json()))


# Module-wide: writing a sample study takes seconds, and no command here changes which
# studies a storage holds (confirm --confirm 0 only adds its verdicts).
@pytest.fixture(scope="module")
def one_study(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('one') / 'one.db'}"
    write_sample_study(url)
    return url


@pytest.fixture(scope="module")
def two_studies(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('two') / 'two.db'}"
    write_sample_study(url)
    _bare_study(url, "zeta")
    return url


def _sample_name(url: str) -> str:
    (summary,) = optuna.get_all_study_summaries(url)
    return summary.study_name


def test_export_uses_the_only_study(one_study: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["export", "--storage", one_study], capsys)
    assert code == 0, err
    assert f"study '{_sample_name(one_study)}'" in out and "vllm serve" in out


def test_report_uses_the_only_study(
    one_study: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["report", "--storage", one_study, "--out", str(tmp_path / "r")], capsys)
    assert code == 0, err
    assert (tmp_path / "r" / "report.md").is_file() and "wrote" in out


def test_confirm_uses_the_only_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --confirm 0 on a study whose floor start (the baseline's round 0) is stored judges what is
    # stored and runs nothing: the command got past the study's name.
    one_study = f"sqlite:///{tmp_path / 'confirmed.db'}"
    write_sample_study(one_study, confirm=((752.0, 648.0),))
    study = optuna.load_study(study_name=_sample_name(one_study), storage=one_study)
    preset = load_preset(model="smollm2-135m", gpu="cpu")  # as `tuner optimize` stores it
    study.set_user_attr(StudyAttr.PRESET, json.loads(preset.model_dump_json()))
    code, out, err = _run(["confirm", "--storage", one_study, "--confirm", "0"], capsys)
    assert code == 0, err
    assert "next: tuner export" in out
    study = optuna.load_study(study_name=_sample_name(one_study), storage=one_study)
    assert StudyAttr.CONFIRMATION in study.user_attrs  # the verdicts were written to it


def test_explain_and_sweep_use_the_only_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'bare.db'}"
    _bare_study(url, "lonely")
    code, _, err = _run(["explain", "--storage", url], capsys)
    assert code == 2 and "study 'lonely' has no finished speculative trial" in err, err
    code, _, err = _run(["sweep", "--storage", url], capsys)
    assert code == 2 and "no finished baseline trial" in err, err
    assert "--study" not in err


@pytest.mark.parametrize("command", ["export", "report", "explain", "confirm", "sweep"])
def test_several_studies_are_one_line_that_lists_them(
    command: str, two_studies: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = [(s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(two_studies)]
    code, _, err = _run([command, "--storage", two_studies], capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    names = sorted([_sample_name_of(two_studies), "zeta"])
    assert line.endswith(f"holds 2 studies; choose one with --study: {', '.join(names)}"), line
    after = [(s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(two_studies)]
    assert after == before  # no study, no trial written


@pytest.mark.parametrize(
    "command", ["export", "report", "explain", "confirm", "sweep", "dashboard"]
)
def test_an_unknown_study_is_one_line(
    command: str, one_study: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run([command, "--storage", one_study, "--study", "nope"], capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "no study named 'nope'" in line and _sample_name(one_study) in line


def test_an_empty_storage_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.storages.RDBStorage(url).engine.dispose()  # Optuna's tables, no study
    code, _, err = _run(["confirm", "--storage", url], capsys)
    assert code == 2 and "holds no study yet; run `tuner optimize` first" in err


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on: the dashboard prints its line, then cannot bind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_dashboard_names_the_only_studys_page(
    one_study: str, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["dashboard", "--storage", one_study, "--port", str(busy_port)], capsys)
    assert code == 2  # the port is taken: after the study was chosen
    first = err.splitlines()[0]
    assert (
        f"study '{_sample_name(one_study)}' at http://127.0.0.1:{busy_port}/dashboard/studies/1"
        in first
    )


def test_dashboard_serves_several_studies_and_lists_them(
    two_studies: str, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["dashboard", "--storage", two_studies, "--port", str(busy_port)], capsys)
    assert code == 2
    names = sorted([_sample_name_of(two_studies), "zeta"])
    assert err.splitlines()[0].endswith(f"/: studies {', '.join(names)}")


def _sample_name_of(url: str) -> str:
    return next(s.study_name for s in optuna.get_all_study_summaries(url) if s.study_name != "zeta")
