"""Each command imports its heavy dependencies itself: the CLI runs where they are missing.

A GPU image may lack optuna-dashboard or matplotlib (they are needed by `tuner dashboard` and
`tuner report` only) and Ray is needed by the study alone. These tests start the real CLI in a
fresh interpreter in which those packages cannot be imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tuner.testing.sample import write_sample_study

HEAVY = ("optuna_dashboard", "matplotlib", "ray")

# `sys.modules[name] = None` makes `import name` (and its submodules) raise ImportError.
_PRELUDE = (
    "import sys\n"
    "for name in {heavy!r}:\n"
    "    sys.modules[name] = None\n"
    "from tuner.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "finally:\n"
    "    loaded = sorted(n for n in {heavy!r} if sys.modules.get(n) is not None)\n"
    "    print('heavy modules loaded:', loaded, file=sys.stderr)\n"
)


def _tuner_without(heavy: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    code = _PRELUDE.format(heavy=heavy)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_blocker_really_blocks(tmp_path: Path) -> None:
    """The prelude makes `tuner dashboard` fail, so the other tests' passes mean something."""
    url = f"sqlite:///{tmp_path / 'sample.db'}"
    write_sample_study(url)  # the storage is checked first: it must exist to reach the import
    proc = _tuner_without(HEAVY, "dashboard", "--port", "1", "--storage", url)
    assert proc.returncode != 0
    assert "optuna_dashboard" in proc.stderr


def test_optimize_help_needs_no_dashboard_matplotlib_or_ray() -> None:
    proc = _tuner_without(HEAVY, "optimize", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--n-trials" in proc.stdout
    assert "heavy modules loaded: []" in proc.stderr


def test_export_runs_without_dashboard_and_matplotlib(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sample.db'}"
    write_sample_study(url)
    proc = _tuner_without(HEAVY, "export", "--storage", url)
    assert proc.returncode == 0, proc.stderr
    assert "vllm serve" in proc.stdout
    assert "heavy modules loaded: []" in proc.stderr


def test_report_is_the_command_that_needs_matplotlib(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sample.db'}"
    write_sample_study(url)
    proc = _tuner_without(("matplotlib",), "report", "--storage", url, "--out", str(tmp_path))
    assert proc.returncode != 0
    assert "matplotlib" in proc.stderr
