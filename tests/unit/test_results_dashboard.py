"""`tuner dashboard` errors: a taken port and a bad storage URL are one line each."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from tuner.cli import main
from tuner.errors import ConfigError
from tuner.results.dashboard import serve_dashboard
from tuner.storage import Store
from tuner.testing.sample import SampleScore, write_sample_study


def test_a_taken_port_is_a_config_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_sample_study(url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"cannot serve the dashboard on 127.0.0.1:{port}"):
            serve_dashboard(url, port=port)


def test_cli_dashboard_on_a_down_server_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["dashboard", "--storage", "postgresql://u:pw@127.0.0.1:1/db", "--port", "1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "cannot open storage postgresql://u:***@127.0.0.1:1/db" in err
    assert "pw@" not in err and "Traceback" not in err


def test_the_note_holds_the_answer_and_the_plots_are_artifacts(tmp_path: Path) -> None:
    import optuna

    from tuner.results import choose_export, load_results, render_export
    from tuner.results.dashboard import artifact_dir, publish_answer

    url = f"sqlite:///{tmp_path / 'study.db'}"
    name = write_sample_study(
        url, ngram=SampleScore(900.0, 850.0, 950.0), confirm=((752.0, 900.0), (760.0, 905.0))
    )
    plots = publish_answer(url, name)
    assert artifact_dir(url) == tmp_path / "study-artifacts"
    study = optuna.load_study(study_name=name, storage=url)
    note = _note(study)
    choice = choose_export(load_results(url, name))
    assert choice.trial.number == 1  # n-gram beats the baseline in its confirmation rounds
    assert "### What to deploy: trial #1, n-gram depth 3" in note
    assert f"**Why:** {choice.reason}" in note
    assert f"```bash\n{render_export(choice, 'shell')}```" in note  # the export, verbatim
    assert "| #1 | n-gram depth 3" in note  # the table of every config against the baseline
    metas = optuna.artifacts.get_all_artifact_meta(study)
    assert sorted(m.filename for m in metas) == plots and "tasks_per_hour.png" in plots
    for meta in metas:
        assert (artifact_dir(url) / meta.artifact_id).read_bytes().startswith(b"\x89PNG")
    assert ", ".join(plots) in note
    # Publishing again (tuner confirm after tuner optimize) replaces the plots, not adds.
    publish_answer(url, name)
    again = optuna.artifacts.get_all_artifact_meta(study)
    assert sorted(m.artifact_id for m in again) == sorted(m.artifact_id for m in metas)
    assert len(list(artifact_dir(url).iterdir())) == len(plots)


def test_a_study_with_nothing_to_deploy_says_so(tmp_path: Path) -> None:
    import optuna

    from tuner.results.dashboard import publish_answer

    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="empty", storage=url)
    Store(url).migrate()
    assert publish_answer(url, "empty") == []
    note = _note(optuna.load_study(study_name="empty", storage=url))
    assert "Nothing to deploy yet: study 'empty' has no completed feasible trial" in note


def test_artifacts_of_a_server_database_go_to_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.results.dashboard import artifact_dir

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert artifact_dir("postgresql://me@127.0.0.1/tuner") == tmp_path / "tuner" / "artifacts"


def _note(study: object) -> str:
    from optuna_dashboard._note import get_note_from_system_attrs

    s: Any = study
    return str(
        get_note_from_system_attrs(s._storage.get_study_system_attrs(s._study_id), None)["body"]
    )
