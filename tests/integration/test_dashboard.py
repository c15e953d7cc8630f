"""`tuner dashboard` on a real study in SQLite, loaded in headless Chromium (Debian's package).

The dashboard is a React page: only a browser that runs its JavaScript shows the study names,
so the check reads the DOM Chromium rendered, and keeps a screenshot in pytest's tmp dir.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from matplotlib.image import imread

from tuner.results import choose_export, load_results, render_export
from tuner.results.dashboard import publish_answer
from tuner.server import free_port
from tuner.testing.sample import write_sample_study

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",
    "--window-size=1280,900",
)


def chromium_path() -> str:
    """Debian's chromium; fails in CI (where .ci/run installs it), skips elsewhere."""
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


def _tuner() -> list[str]:
    # The `tuner` script as a user runs it; `python -c` when the package is not installed.
    script = Path(sys.executable).with_name("tuner")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from tuner.cli import main; main()"]


def _listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as the kernel writes them) listening on `port`, IPv4 and IPv6."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


@contextmanager
def running_dashboard(storage_url: str, log_path: Path) -> Iterator[str]:
    """`tuner dashboard` on `storage_url` as a subprocess; yields its base URL once it answers."""
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*_tuner(), "dashboard", "--storage", storage_url, "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"tuner dashboard exited: {log_path.read_text()}")
            try:
                if httpx.get(f"{base}/api/studies", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"tuner dashboard did not answer within 60 s: {log_path.read_text()}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _chromium(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium; a browser that dies on a signal is started again (twice at most).

    Debian's Chromium 156 died once on CI with SIGSEGV before rendering anything, and passed on
    every run here: the browser's own crash is not what these tests check. A non-zero exit, a
    third crash or a timeout still fails, with the browser's last lines of stderr.
    """
    for attempt in range(3):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if proc.returncode >= 0 or attempt == 2:
            break
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        pytest.fail(f"chromium exited with {proc.returncode} (3 tries if by a signal):\n{tail}")
    return proc


def render_in_chromium(url: str, tmp_path: Path, screenshot: Path | None = None) -> str:
    """The DOM headless Chromium rendered for `url` (JavaScript run); optionally a screenshot."""
    chromium = chromium_path()
    profile = tmp_path / "chromium-profile"
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = _chromium([chromium, *flags, "--dump-dom", url]).stdout
    if screenshot is not None:
        _chromium([chromium, *flags, f"--screenshot={screenshot}", url])
    return dom[dom.find("<body") :]


def assert_screenshot_shows_a_page(path: Path) -> None:
    """The screenshot exists at the window size and is not blank."""
    pixels = imread(path)
    assert pixels.shape[:2] == (900, 1280)
    assert pixels[..., :3].std() > 0.05


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A running `tuner dashboard` on a sample study; yields (base URL, study name)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    name = write_sample_study(url, study_name="agents-dashboard-check")
    publish_answer(url, name)  # what the end of `tuner optimize` and `tuner confirm` do
    with running_dashboard(url, tmp_path / "dashboard.log") as base:
        yield base, name


def test_dashboard_binds_loopback_and_serves_the_study(dashboard: tuple[str, str]) -> None:
    base, name = dashboard
    port = int(base.rsplit(":", 1)[1])
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only, not 0.0.0.0
    studies = httpx.get(f"{base}/api/studies", timeout=5).json()["study_summaries"]
    assert [s["study_name"] for s in studies] == [name]


def test_chromium_renders_the_study_name(dashboard: tuple[str, str], tmp_path: Path) -> None:
    base, name = dashboard
    # The static page holds no study names: they appear only once the app has rendered.
    assert name not in httpx.get(f"{base}/dashboard", timeout=5).text
    assert name in render_in_chromium(f"{base}/dashboard", tmp_path)
    shot = tmp_path / "dashboard.png"
    body = render_in_chromium(f"{base}/dashboard/studies/1", tmp_path, screenshot=shot)
    assert "History" in body
    assert_screenshot_shows_a_page(shot)


def test_the_study_page_says_replay_is_load_shape(dashboard: tuple[str, str]) -> None:
    base, _name = dashboard
    study = httpx.get(f"{base}/api/studies/1", timeout=5).json()
    attrs = {a["key"]: a["value"] for a in study["user_attrs"]}
    assert attrs["mode"] == "replay"
    assert attrs["mode_note"] == "load shape: answers not graded"
    assert "**Workload mode: replay (load shape: answers not graded)**" in study["note"]["body"]


def test_chromium_renders_the_recommendation_in_the_studys_note(
    dashboard: tuple[str, str], tmp_path: Path
) -> None:
    """The dashboard alone answers "what should I deploy and why": the note, as rendered."""
    base, name = dashboard
    url = f"sqlite:///{tmp_path / 'study.db'}"
    choice = choose_export(load_results(url, name))
    command = render_export(choice, "shell")
    assert choice.trial.number == 0  # the sample's n-gram loses: the baseline is the answer
    # The note is Markdown in the database; only the app's JavaScript renders it into the page.
    assert "What to deploy" not in httpx.get(f"{base}/dashboard/studies/1/note", timeout=5).text
    body = render_in_chromium(f"{base}/dashboard/studies/1/note", tmp_path)
    text = html.unescape(re.sub(r"<[^>]+>", "", body))
    assert "What to deploy: trial #0, no speculation (the baseline)" in text
    assert f"Why: {choice.reason}" in text
    # The exported command and its evidence, line for line as `tuner export` prints them.
    for line in command.splitlines():
        assert line.strip() in text, line
    assert "completed tasks/h" in text and "successful tasks/h" not in text


def test_the_report_plots_are_the_studys_artifacts(dashboard: tuple[str, str]) -> None:
    base, _name = dashboard
    study = httpx.get(f"{base}/api/studies/1", timeout=5).json()
    artifacts = {a["filename"]: a for a in study["artifacts"]}
    assert {"tasks_per_hour.png", "history.png"} <= set(artifacts)
    for meta in artifacts.values():
        assert meta["mimetype"] == "image/png"
        png = httpx.get(f"{base}/artifacts/1/{meta['artifact_id']}", timeout=5)
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG"), meta["filename"]
    assert ", ".join(sorted(artifacts)) in study["note"]["body"]
