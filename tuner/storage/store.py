"""Read and write tuner's own records; the only place that sees ORM rows.

A `Store` is opened on the same URL as the Optuna study. Only the study driver writes to it
(workers return records through Ray). It pickles without its engine, like Optuna's RDBStorage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine, Select, delete, select
from sqlalchemy.orm import Session, selectinload

from tuner.records import (
    ServerStartRecord,
    StartupFacts,
    StepRecord,
    TaskRecord,
    ThroughputRecord,
    WorkloadRecord,
)
from tuner.storage.engine import open_engine
from tuner.storage.migrations import upgrade
from tuner.storage.schema import (
    ServerStartRow,
    StartMeasured,
    StepRow,
    TaskResultRow,
    ThroughputRunRow,
    TrialKeyed,
    WorkloadRunRow,
)

__all__ = ["Store", "Stored", "TrialMeasurements"]

T = TypeVar("T")
R = TypeVar("R", bound=TrialKeyed)

# Record fields stored as they are, by the same name, in both directions.
_FACT_FIELDS = tuple(f.name for f in fields(StartupFacts))
_START_FIELDS = tuple(
    f.name
    for f in fields(ServerStartRecord)
    if f.name not in ("argv", "env", "started_at", "ended_at", "failure_details", "facts")
)
_TASK_FIELDS = tuple(f.name for f in fields(TaskRecord) if f.name != "steps")
_STEP_FIELDS = tuple(f.name for f in fields(StepRecord))
_THROUGHPUT_FIELDS = tuple(f.name for f in fields(ThroughputRecord))
_WORKLOAD_SCALARS = tuple(
    f.name
    for f in fields(WorkloadRecord)
    if f.name not in ("task_records", "spec_accepted_per_pos")
)


@dataclass(frozen=True)
class Stored(Generic[T]):
    """A record read back, with where it belongs."""

    id: int
    study_name: str
    trial_number: int | None
    record: T
    server_start_id: int | None = None


@dataclass(frozen=True)
class TrialMeasurements:
    """Everything one trial measured, written in one transaction."""

    server_starts: tuple[ServerStartRecord, ...] = ()
    workload: WorkloadRecord | None = None
    throughput: tuple[ThroughputRecord, ...] = ()


def _dt(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None) if ts else None


def _ts(value: datetime | None) -> float | None:
    return value.replace(tzinfo=UTC).timestamp() if value else None


class Store:
    """tuner's tables on one database URL."""

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = url
        self._migrate = migrate
        self._engine: Engine | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_engine"] = None
        return state

    @property
    def engine(self) -> Engine:
        """The engine, opened (and our tables migrated to head) on first use."""
        return self.migrate()

    def migrate(self) -> Engine:
        """Migrate tuner's tables to head (unless `migrate=False`) and open the engine, now.

        Every other method does this on first use; call it to have it done at a set point,
        e.g. before Optuna touches the same database. Later calls do nothing.
        """
        if self._engine is None:
            if self._migrate:
                upgrade(self.url)
            self._engine = open_engine(self.url)
        return self._engine

    def close(self) -> None:
        """Dispose of the connection pool."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    # ---- writing -------------------------------------------------------------------------

    def save_trial(self, study_name: str, trial_number: int | None, m: TrialMeasurements) -> None:
        """Replace the trial's rows with `m`, atomically (a resumed trial never doubles)."""
        with self._session() as s:
            self._delete_trial(s, study_name, trial_number)
            start_ids = [
                _insert(s, _start_row(r), study_name, trial_number) for r in m.server_starts
            ]
            last_start = start_ids[-1] if start_ids else None
            if m.workload is not None:
                _insert(s, _workload_row(m.workload), study_name, trial_number, last_start)
            for tp in m.throughput:
                _insert(s, _throughput_row(tp), study_name, trial_number, last_start)

    def add_server_start(
        self, study_name: str, trial_number: int | None, record: ServerStartRecord
    ) -> int:
        """Append one server start; returns its id."""
        with self._session() as s:
            return _insert(s, _start_row(record), study_name, trial_number)

    def add_workload_run(
        self,
        study_name: str,
        trial_number: int | None,
        record: WorkloadRecord,
        *,
        server_start_id: int | None = None,
    ) -> int:
        """Append one workload run with its tasks and steps; returns its id."""
        with self._session() as s:
            return _insert(s, _workload_row(record), study_name, trial_number, server_start_id)

    def delete_trial(self, study_name: str, trial_number: int | None) -> None:
        """Remove every row of one trial."""
        with self._session() as s:
            self._delete_trial(s, study_name, trial_number)

    @staticmethod
    def _delete_trial(s: Session, study_name: str, trial_number: int | None) -> None:
        for model in (WorkloadRunRow, ThroughputRunRow, ServerStartRow):
            runs = s.scalars(
                select(model).where(
                    model.study_name == study_name, model.trial_number == trial_number
                )
            ).all()
            for row in runs:
                s.delete(row)  # ORM delete so task and step rows cascade on every backend
        s.flush()

    # ---- reading -------------------------------------------------------------------------

    def server_starts(
        self, study_name: str, trial_number: int | None = None
    ) -> list[Stored[ServerStartRecord]]:
        """Server starts of a study (or of one trial), oldest first."""
        return self._read(_of_trial(ServerStartRow, study_name, trial_number), _start_record)

    def workload_runs(
        self, study_name: str, trial_number: int | None = None, *, with_tasks: bool = False
    ) -> list[Stored[WorkloadRecord]]:
        """Workload runs of a study (or of one trial), oldest first."""
        q = _of_trial(WorkloadRunRow, study_name, trial_number)
        if with_tasks:
            q = q.options(
                selectinload(WorkloadRunRow.task_results).selectinload(TaskResultRow.steps)
            )
        return self._read(q, lambda row: _workload_record(row, with_tasks))

    def throughput_runs(
        self, study_name: str, trial_number: int | None = None
    ) -> list[Stored[ThroughputRecord]]:
        """Plain-benchmark results of a study (or of one trial)."""
        return self._read(_of_trial(ThroughputRunRow, study_name, trial_number), _throughput_record)

    def _read(self, q: Select[R], record: Callable[[R], T]) -> list[Stored[T]]:
        """The rows `q` selects, each as its record with where it belongs."""
        with self._session() as s:
            return [_stored(row, record(row)) for row in s.scalars(q).all()]

    def trial_numbers(self, study_name: str) -> Sequence[int]:
        """Trial numbers that have any server start recorded."""
        with self._session() as s:
            q = select(ServerStartRow.trial_number).where(ServerStartRow.study_name == study_name)
            return sorted({n for n in s.scalars(q) if n is not None})

    def delete_study(self, study_name: str) -> None:
        """Remove all of a study's rows (tasks and steps cascade)."""
        with self._session() as s:
            for model in (WorkloadRunRow, ThroughputRunRow):
                for row in s.scalars(select(model).where(model.study_name == study_name)):
                    s.delete(row)
            s.flush()
            s.execute(delete(ServerStartRow).where(ServerStartRow.study_name == study_name))


def _start_row(r: ServerStartRecord) -> ServerStartRow:
    return ServerStartRow(
        argv=list(r.argv),
        env=dict(r.env),
        started_at=_dt(r.started_at),
        ended_at=_dt(r.ended_at),
        failure_details=dict(r.failure_details),
        **{name: getattr(r, name) for name in _START_FIELDS},
        **{name: getattr(r.facts, name) for name in _FACT_FIELDS},
    )


def _workload_row(r: WorkloadRecord) -> WorkloadRunRow:
    row = WorkloadRunRow(
        spec_accepted_per_pos=(
            list(r.spec_accepted_per_pos) if r.spec_accepted_per_pos is not None else None
        ),
        **{name: getattr(r, name) for name in _WORKLOAD_SCALARS},
    )
    for t in r.task_records:
        task_row = TaskResultRow(
            num_steps=len(t.steps),
            prompt_tokens=t.prompt_tokens,
            output_tokens=t.output_tokens,
            **{name: getattr(t, name) for name in _TASK_FIELDS},
        )
        task_row.steps = [
            StepRow(**{name: getattr(st, name) for name in _STEP_FIELDS}) for st in t.steps
        ]
        row.task_results.append(task_row)
    return row


def _throughput_row(r: ThroughputRecord) -> ThroughputRunRow:
    return ThroughputRunRow(
        output_tokens_per_s=r.output_tokens_per_s,
        **{name: getattr(r, name) for name in _THROUGHPUT_FIELDS},
    )


def _insert(
    s: Session,
    row: TrialKeyed,
    study_name: str,
    trial_number: int | None,
    server_start_id: int | None = None,
) -> int:
    """Add `row` (with its children) as the trial's, on server start `server_start_id` where the
    row is a measurement; return the id the database gave it."""
    row.study_name = study_name
    row.trial_number = trial_number
    if isinstance(row, StartMeasured):
        row.server_start_id = server_start_id
    s.add(row)
    s.flush()
    return row.id


def _of_trial(model: type[R], study_name: str, trial_number: int | None) -> Select[R]:
    """The rows of `model` of a study (or of one trial: `trial_number`), oldest first."""
    q = select(model).where(model.study_name == study_name)
    if trial_number is not None:
        q = q.where(model.trial_number == trial_number)
    return q.order_by(model.id)


def _stored(row: TrialKeyed, record: T) -> Stored[T]:
    """`record`, read from `row`, with where it belongs."""
    server_start_id = row.server_start_id if isinstance(row, StartMeasured) else None
    return Stored(row.id, row.study_name, row.trial_number, record, server_start_id)


def _start_record(row: ServerStartRow) -> ServerStartRecord:
    return ServerStartRecord(
        argv=tuple(row.argv),
        env=dict(row.env),
        started_at=_ts(row.started_at) or 0.0,
        ended_at=_ts(row.ended_at),
        failure_details=dict(row.failure_details or {}),
        facts=StartupFacts(**{name: getattr(row, name) for name in _FACT_FIELDS}),
        **{name: getattr(row, name) for name in _START_FIELDS},
    )


def _throughput_record(row: ThroughputRunRow) -> ThroughputRecord:
    return ThroughputRecord(**{name: getattr(row, name) for name in _THROUGHPUT_FIELDS})


def _workload_record(row: WorkloadRunRow, with_tasks: bool) -> WorkloadRecord:
    tasks: tuple[TaskRecord, ...] = ()
    if with_tasks:
        tasks = tuple(
            TaskRecord(
                steps=tuple(
                    StepRecord(**{name: getattr(st, name) for name in _STEP_FIELDS})
                    for st in t.steps
                ),
                **{name: getattr(t, name) for name in _TASK_FIELDS},
            )
            for t in row.task_results
        )
    per_pos = tuple(row.spec_accepted_per_pos) if row.spec_accepted_per_pos is not None else None
    return WorkloadRecord(
        spec_accepted_per_pos=per_pos,
        task_records=tasks,
        **{name: getattr(row, name) for name in _WORKLOAD_SCALARS},
    )
