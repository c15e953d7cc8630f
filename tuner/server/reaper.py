"""Process groups of started servers: a pid-file registry, group stops, and reaping orphans.

Every server runs in its own session, so its process group holds the API server, the engine
core and its workers. Each started group is written to a pid file in a state directory with
the pid and start time of the tuner process that owns it. A tuner killed with SIGKILL leaves
its server running; the next `Launcher` (or `reap_orphans`) finds pid files whose owner is gone
and stops those groups. Start times (from /proc) guard against reused pids.

Linux only: group members are read from /proc, ignoring zombies (a container's init may never
reap them, and a zombie holds no memory or port).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "PidRecord",
    "descendants",
    "group_members",
    "kill_group",
    "live_records",
    "port_free",
    "reap_orphans",
    "register",
    "start_ticks",
    "unregister",
]


@dataclass(frozen=True)
class PidRecord:
    """One started server group and the tuner process that owns it."""

    pid: int
    pgid: int
    port: int
    started_at: float
    start_ticks: int | None
    owner_pid: int
    owner_start_ticks: int | None
    log_path: str = ""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; it ends at the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if it does not exist."""
    stat = _stat_fields(pid)
    return int(stat[19]) if stat is not None else None


def _alive(pid: int, ticks: int | None) -> bool:
    stat = _stat_fields(pid)
    if stat is None or stat[0] == "Z":
        return False
    return ticks is None or int(stat[19]) == ticks


def group_members(pgid: int, *, since_ticks: int | None = None) -> list[int]:
    """Live (non-zombie) processes in group `pgid`, optionally only those started since a time."""
    members: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _stat_fields(int(entry.name))
        if stat is None or stat[0] == "Z" or int(stat[2]) != pgid:
            continue
        if since_ticks is not None and int(stat[19]) < since_ticks:
            continue
        members.append(int(entry.name))
    return members


def _signal_members(members: list[int], sig: signal.Signals) -> None:
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_group(
    pgid: int, *, grace_s: float = 15.0, since_ticks: int | None = None, poll_s: float = 0.05
) -> list[int]:
    """SIGTERM every member of group `pgid`, SIGKILL what is left after `grace_s`.

    Args:
        pgid: The process group (the server's session leader pid).
        grace_s: Seconds to wait after SIGTERM before SIGKILL.
        since_ticks: Only processes started at or after this time (guards against pid reuse).
        poll_s: How often to look for survivors.

    Returns:
        Members still alive 5 s after SIGKILL (empty when the group is gone).
    """
    members = group_members(pgid, since_ticks=since_ticks)
    _signal_members(members, signal.SIGTERM)
    # A stopped member (SIGSTOP, a debugger) would hold SIGTERM pending until the SIGKILL.
    _signal_members(members, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    while (members := group_members(pgid, since_ticks=since_ticks)) and (
        time.monotonic() < deadline
    ):
        time.sleep(poll_s)
    if not members:
        return []
    _signal_members(members, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while (members := group_members(pgid, since_ticks=since_ticks)) and (
        time.monotonic() < deadline
    ):
        time.sleep(poll_s)
    return members


def port_free(host: str, port: int) -> bool:
    """True when a new server could bind `host:port` now (as uvicorn does, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def register(state_dir: Path, record: PidRecord) -> Path:
    """Write `record` to a pid file in `state_dir` (atomically); return its path."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / f"server-{record.pgid}-{record.port}.json"
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(asdict(record)))
    os.replace(staging, path)
    return path


def unregister(path: Path) -> None:
    """Remove a pid file (gone already is fine)."""
    path.unlink(missing_ok=True)


def _read(path: Path) -> PidRecord | None:
    try:
        return PidRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def live_records(state_dir: Path) -> list[PidRecord]:
    """The pid files in `state_dir` that can be read (their groups may be gone)."""
    if not state_dir.is_dir():
        return []
    return [r for p in sorted(state_dir.glob("server-*.json")) if (r := _read(p)) is not None]


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, theirs, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _stat_fields(int(entry.name))
        if stat is not None and stat[0] != "Z":
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def reap_orphans(state_dir: Path, *, grace_s: float = 10.0) -> list[PidRecord]:
    """Stop server groups whose owning tuner process is gone; return the ones reaped.

    Groups owned by a live process (this one or another tuner) are left alone, so several
    launchers can share one state directory.
    """
    if not state_dir.is_dir():
        return []
    reaped: list[PidRecord] = []
    for path in sorted(state_dir.glob("server-*.json")):
        record = _read(path)
        if record is None:
            unregister(path)
            continue
        if _alive(record.owner_pid, record.owner_start_ticks):
            continue
        if group_members(record.pgid, since_ticks=record.start_ticks):
            kill_group(record.pgid, grace_s=grace_s, since_ticks=record.start_ticks)
            reaped.append(record)
        unregister(path)
    return reaped
