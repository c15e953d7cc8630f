"""The live view of a running study: trials done, each slot's config and state, best so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuner.attrs import TrialAttr
from tuner.results.configs import describe_config_short

if TYPE_CHECKING:
    from tuner.study.search.progress import ProgressLines

__all__ = ["SlotView", "StudyDisplay", "describe_trial", "ran_params"]


def ran_params(params: dict[str, Any], user_attrs: dict[str, Any]) -> dict[str, Any]:
    """The params of the server that actually ran (max_num_seqs after a Mamba clamp)."""
    clamped = user_attrs.get(TrialAttr.MAX_NUM_SEQS_CLAMPED)
    return {**params, "max_num_seqs": clamped} if clamped is not None else dict(params)


def describe_trial(params: dict[str, Any], user_attrs: dict[str, Any]) -> str:
    """`describe_config_short` of what ran, saying when max_num_seqs was clamped from the asked."""
    label = describe_config_short(ran_params(params, user_attrs))
    if user_attrs.get(TrialAttr.MAX_NUM_SEQS_CLAMPED) is not None:
        label += f" (max_num_seqs clamped from {params.get('max_num_seqs')})"
    return label


@dataclass
class SlotView:
    """What one worker slot is doing."""

    trial: int | None = None
    label: str = ""
    state: str = "idle"
    tasks_done: int = 0
    tasks_total: int = 0
    tasks_per_hour: float | None = None


@dataclass
class StudyDisplay:
    """A rich Live display; `update()` redraws it. Silent when `enabled` is False.

    `lines`, when set, is where the study loop writes one plain line per event instead (output
    that is not a terminal: `tuner.study.search.progress`).
    """

    total: int
    study_name: str
    enabled: bool = True
    console: Console = field(default_factory=lambda: Console(stderr=True))
    slots: list[SlotView] = field(default_factory=list)
    best: str = "-"
    lines: ProgressLines | None = None

    def __post_init__(self) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
        )
        self._task = self._progress.add_task(f"study {self.study_name}", total=self.total)
        self._live: Live | None = None

    def __enter__(self) -> StudyDisplay:
        if self.enabled:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)
            self._live = None

    def update(self, *, finished: int | None = None) -> None:
        """Redraw with the current slot views."""
        if finished is not None:
            # The total is known once the run's target is (it may continue an earlier run's).
            self._progress.update(self._task, total=self.total, completed=finished)
        if self._live is not None:
            self._live.update(self._render())

    def _render(self) -> Group:
        table = Table(box=None, expand=False, pad_edge=False)
        for column in ("slot", "trial", "config", "server", "tasks", "tasks/h so far"):
            table.add_column(column)
        for i, slot in enumerate(self.slots):
            tasks = f"{slot.tasks_done}/{slot.tasks_total}" if slot.tasks_total else "-"
            rate = f"{slot.tasks_per_hour:.0f}" if slot.tasks_per_hour is not None else "-"
            trial = str(slot.trial) if slot.trial is not None else "-"
            table.add_row(str(i), trial, slot.label, slot.state, tasks, rate)
        return Group(self._progress, table, f"best so far: {self.best}")
