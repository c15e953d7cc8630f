"""A lock that several drivers of one study share through its storage, and lose when they die.

Several `tuner optimize` drivers may run one study (`tuner.study.search.resume`). Where one of
them must read the study and then write on what it read, with no other driver writing between
(the confirmation stage queueing the runs a round lacks: `tuner.study.stages.confirm`),
it holds `study_lock` for that study and purpose. The lock is the database's own, held on a
connection of its own, so a driver that is killed while holding it releases it with its
connection:

- Postgres: a session-level advisory lock (`pg_advisory_lock`) on a 64-bit key hashed from
  the study name and purpose.
- MySQL/MariaDB: a named lock (`GET_LOCK`).
- SQLite file: an exclusive `flock` on a file named by the key, in a folder beside the
  database (`<file>.tuner-locks/`); every driver of a SQLite study runs on the machine that
  holds the file.
- In-memory SQLite: one process, so nothing to share; no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from tuner.storage.engine import masked, normalize_url

__all__ = ["lock_key", "study_lock"]

# How long a driver waits for another to release the lock before it says so and fails: the
# holder only reads and queues a few trials (seconds), so a minute means something is wrong.
LOCK_WAIT_S = 60


def lock_key(study_name: str, purpose: str) -> int:
    """A signed 64-bit key for `study_name` and `purpose`, the same in every process."""
    digest = hashlib.sha256(f"tuner:{purpose}:{study_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.contextmanager
def study_lock(url: str, study_name: str, purpose: str) -> Iterator[None]:
    """Hold the storage's lock for `study_name` and `purpose` inside the block (see the module
    docstring); blocks while another driver holds it.

    Raises:
        TimeoutError: another driver held it for `LOCK_WAIT_S` seconds.
    """
    parsed = make_url(normalize_url(url))
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        db = parsed.database
        if not db or db == ":memory:" or db.startswith("file:"):
            yield
            return
        path = Path(db).expanduser()
        folder = path.with_name(path.name + ".tuner-locks")
        folder.mkdir(exist_ok=True)
        with _file_lock(folder / f"{lock_key(study_name, purpose) & (2**64 - 1):016x}"):
            yield
        return
    if backend not in ("postgresql", "mysql", "mariadb"):
        yield  # a backend without a lock of its own: one driver per study
        return
    # NullPool: the lock's connection is closed, never pooled, when the block ends.
    engine = create_engine(parsed, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            key = lock_key(study_name, purpose)
            if backend == "postgresql":
                conn.execute(text(f"SET lock_timeout = '{LOCK_WAIT_S}s'"))
                try:
                    conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
                except OperationalError:
                    raise TimeoutError(
                        f"another driver held study {study_name!r}'s {purpose} lock on "
                        f"{masked(url)} for {LOCK_WAIT_S} s"
                    ) from None
                unlock = text("SELECT pg_advisory_unlock(:k)")
                params: dict[str, object] = {"k": key}
            else:
                name = f"tuner-{key & 0xFFFFFFFFFFFF:x}"
                got = conn.execute(
                    text("SELECT GET_LOCK(:n, :t)"), {"n": name, "t": LOCK_WAIT_S}
                ).scalar()
                if got != 1:
                    raise TimeoutError(
                        f"another driver held study {study_name!r}'s {purpose} lock on "
                        f"{masked(url)} for {LOCK_WAIT_S} s"
                    )
                unlock = text("SELECT RELEASE_LOCK(:n)")
                params = {"n": name}
            conn.commit()
            try:
                yield
            finally:
                # A connection lost meanwhile took its lock with it.
                with contextlib.suppress(SQLAlchemyError):
                    conn.execute(unlock, params)
                    conn.commit()
    finally:
        engine.dispose()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
