"""`--confirm` and `tuner confirm`: bad input is one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.cli import main
from tuner.errors import ConfigError
from tuner.results.sample import write_sample_study
from tuner.study.confirm import ConfirmPlan, parse_confirm


def test_parse_confirm() -> None:
    assert parse_confirm("2,3") == ConfirmPlan(2, 3)
    assert parse_confirm(" 1 , 2 ") == ConfirmPlan(1, 2)
    assert not parse_confirm("0").enabled
    assert not parse_confirm("0,2").enabled
    for bad in ("x", "2", "2,3,4", "-1,2", "2,x"):
        with pytest.raises(ConfigError, match="give K,R"):
            parse_confirm(bad)


def test_a_bad_confirm_option_fails_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "study.db"
    argv = ["optimize", "--model", "smollm2-135m", "--gpu", "cpu", "--confirm", "2;2"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--storage", f"sqlite:///{db}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--confirm '2;2': give K,R" in err and "Traceback" not in err
    assert not db.exists()


def test_confirm_on_an_unknown_study_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_sample_study(url)
    with pytest.raises(SystemExit) as info:
        main(["confirm", "--study", "nope", "--storage", url])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "no study named 'nope'" in err and "Traceback" not in err
