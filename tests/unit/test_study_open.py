"""Resuming a study checks that its trials stay comparable, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.attrs import StudyAttr
from tuner.errors import StudyError
from tuner.study.search.driver import open_study
from tuner.study.search.options import OptimizeOptions
from tuner.study.space import Preset, load_preset


def _options(tmp_path: Path) -> OptimizeOptions:
    return OptimizeOptions(
        storage_url=f"sqlite:///{tmp_path / 'tuner.db'}", cache_dir=tmp_path, study_name="s"
    )


@pytest.fixture
def preset() -> Preset:
    return load_preset(model="smollm2-135m", gpu="cpu")


def _with_workload(preset: Preset, **update: object) -> Preset:
    return preset.model_copy(update={"workload": preset.workload.model_copy(update=update)})


def test_the_same_preset_resumes(tmp_path: Path, preset: Preset) -> None:
    open_study(preset, _options(tmp_path))
    open_study(preset, _options(tmp_path))
    summaries = optuna.get_all_study_summaries(storage=_options(tmp_path).storage_url)
    assert [s.study_name for s in summaries] == ["s"]


def test_a_changed_workload_is_refused(tmp_path: Path, preset: Preset) -> None:
    open_study(preset, _options(tmp_path))
    with pytest.raises(StudyError, match="different preset or workload"):
        open_study(_with_workload(preset, tasks=preset.workload.tasks + 1), _options(tmp_path))


def test_after_search_fields_may_change(tmp_path: Path, preset: Preset) -> None:
    open_study(preset, _options(tmp_path))
    swept = preset.model_copy(update={"load_sweep": (1, 2, 4)})
    open_study(swept, _options(tmp_path))  # the sweep does not change how trials scored


def test_a_study_stored_before_a_field_existed_resumes(tmp_path: Path, preset: Preset) -> None:
    options = _options(tmp_path)
    open_study(preset, options)
    study = optuna.load_study(study_name="s", storage=options.storage_url)
    stored = dict(study.user_attrs[StudyAttr.PRESET])
    del stored["load_sweep"]  # what an older tuner wrote: the field did not exist
    study.set_user_attr(StudyAttr.PRESET, stored)
    open_study(preset, options)


def test_a_stored_preset_that_no_longer_validates_is_refused(
    tmp_path: Path, preset: Preset
) -> None:
    options = _options(tmp_path)
    open_study(preset, options)
    study = optuna.load_study(study_name="s", storage=options.storage_url)
    study.set_user_attr(StudyAttr.PRESET, {"model": "gone"})
    with pytest.raises(StudyError, match="different preset"):
        open_study(preset, options)
