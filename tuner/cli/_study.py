"""Which study a command reads: the one rule every study command follows.

`--study NAME` names it; without it the storage's only study is used. A storage holding several
studies (and no `--study`) is one line listing their names, exit 2; so is an empty one, and a
name the storage does not hold. `tuner export`, `report`, `explain`, `confirm`, `sweep` and
`dashboard` all call `pick_study`, so they behave alike.
"""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

__all__ = ["STUDY_HELP", "StudyOption", "pick_study", "storage_url", "study_names"]

STUDY_HELP = "Study name (default: the only study in the storage; several: give one)."

StudyOption = Annotated[str | None, typer.Option("--study", help=STUDY_HELP)]


def storage_url(storage: str | None) -> str:
    """`--storage`, else TUNER_STORAGE, else the default SQLite file."""
    from tuner.settings import get_settings  # pydantic-settings: not at the CLI's start-up

    return storage or get_settings().storage_url()


def pick_study(storage: str | None, study: str | None) -> str:
    """The study a command reads from `storage` (see the module docstring for the rule).

    Raises:
        StorageError: the storage cannot be opened.
        StudyError: no such study, an empty storage, or several and none named.
    """
    # Imported here: Optuna's storage costs a second that `tuner --help` need not pay.
    from tuner.results.study_reader import open_optuna_storage, resolve_study_name

    url = storage_url(storage)
    optuna_storage = open_optuna_storage(url)
    try:
        return resolve_study_name(optuna_storage, study, url)
    finally:
        with contextlib.suppress(Exception):  # disposing a pool must not hide the real error
            optuna_storage.remove_session()
            optuna_storage.engine.dispose()


def study_names(storage: str | None) -> list[str]:
    """The names of the studies in `storage`, sorted."""
    from tuner.results.study_reader import open_optuna_storage

    optuna_storage = open_optuna_storage(storage_url(storage))
    try:
        return sorted(s.study_name for s in optuna_storage.get_all_studies())
    finally:
        with contextlib.suppress(Exception):
            optuna_storage.remove_session()
            optuna_storage.engine.dispose()
