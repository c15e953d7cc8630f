"""`--confirm` and `tuner confirm`: bad input is one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.cli import main
from tuner.errors import ConfigError
from tuner.study.space import load_preset
from tuner.study.stages.confirm_plan import ConfirmPlan, parse_confirm
from tuner.testing.sample import write_sample_study


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


def test_a_study_with_only_its_baseline_queues_no_confirmation_run(tmp_path: Path) -> None:
    # `tuner optimize --n-trials 1` leaves the baseline alone: nothing to pair it with, so the
    # stage must not spend server starts re-running it (this test starts no server: a queued
    # run would make run_waiting start Ray and a vLLM, and the trial count would grow).
    import json

    import optuna

    from tuner.attrs import StudyAttr, TrialAttr
    from tuner.study import OptimizeOptions
    from tuner.study.space import load_preset
    from tuner.study.stages.confirm import confirm_study

    url = f"sqlite:///{tmp_path / 'study.db'}"
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    study = optuna.create_study(study_name="alone", storage=url, direction="maximize")
    study.set_user_attr(StudyAttr.PRESET, json.loads(preset.model_dump_json()))
    study.enqueue_trial(preset.baseline_params(), user_attrs={TrialAttr.ROLE: "baseline"})
    trial = study.ask()
    preset.suggest(trial)
    study.tell(trial, 600.0)

    summary = confirm_study(
        OptimizeOptions(storage_url=url, cache_dir=tmp_path, study_name="alone"),
        ConfirmPlan(1, 2),
    )
    assert summary.queued == 0
    loaded = optuna.load_study(study_name="alone", storage=url)
    assert len(loaded.trials) == 1
    assert loaded.user_attrs[StudyAttr.CONFIRM_PENDING] is False  # the stage is over


def test_the_preset_sets_the_confirmation_stage_and_the_option_overrides_it(
    tmp_path: Path,
) -> None:
    cpu = load_preset(model="smollm2-135m", gpu="cpu")
    # The default: the top 2, up to 10 sequential rounds (docs/decision-sim.md).
    assert ConfirmPlan.for_preset(cpu) == ConfirmPlan(2, 10)
    gpu = load_preset(model="tiny-hybrid-mtp", gpu="h200")
    assert ConfirmPlan.for_preset(gpu) == ConfirmPlan(2, 10)
    data = cpu.model_dump(mode="json")
    data["confirm"] = {"top_k": 3, "rounds": 1}
    preset_file = tmp_path / "p.yaml"
    preset_file.write_text(yaml.safe_dump(data))
    assert ConfirmPlan.for_preset(load_preset(space=preset_file)) == ConfirmPlan(3, 1)
    data["confirm"] = {"top_k": 0, "rounds": 1}
    preset_file.write_text(yaml.safe_dump(data))
    assert not ConfirmPlan.for_preset(load_preset(space=preset_file)).enabled


def test_a_bad_confirm_field_in_a_preset_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = load_preset(model="smollm2-135m", gpu="cpu").model_dump(mode="json")
    data["confirm"] = {"top_k": 1, "rounds": 0}
    preset_file = tmp_path / "p.yaml"
    preset_file.write_text(yaml.safe_dump(data))
    db = tmp_path / "study.db"
    with pytest.raises(SystemExit) as info:
        main(["optimize", "--space", str(preset_file), "--storage", f"sqlite:///{db}"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "confirm.rounds" in err and len(err.splitlines()) == 1, err
    assert not db.exists()


def test_confirm_on_a_study_without_a_stored_preset_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A study tuner optimize did not write (here: the sample study, which stores no preset) has
    # nothing to re-run; this was an internal KeyError('preset').
    url = f"sqlite:///{tmp_path / 'study.db'}"
    name = write_sample_study(url)
    with pytest.raises(SystemExit) as info:
        main(["confirm", "--storage", url, "--study", name, "--confirm", "1,1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"study {name!r} has no stored preset" in err
    assert "internal error" not in err and "Traceback" not in err
