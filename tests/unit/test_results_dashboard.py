"""`tuner dashboard` errors: a taken port and a bad storage URL are one line each."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tuner.cli import main
from tuner.errors import ConfigError
from tuner.results.dashboard import serve_dashboard
from tuner.testing.sample import write_sample_study


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
