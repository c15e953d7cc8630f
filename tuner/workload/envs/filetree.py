"""The file tree: a log directory to archive and clean by date, with path-heavy outputs."""

from __future__ import annotations

import posixpath
import random
from typing import Any

from tuner.workload.envs.base import Call, Environment, Scenario, lookup
from tuner.workload.envs.tools import ToolError, ToolSpec, string_param

__all__ = ["FileTree"]

SERVICES = ("billing", "search", "auth", "gateway", "mailer", "reports", "scheduler", "ingest")
USERS = ("svc-backup", "svc-deploy", "ops-oncall", "logrotate")


class FileTree(Environment):
    """Files by absolute path with size in bytes and modification date."""

    name = "filetree"
    pad_key = "access_log"
    tools = (
        ToolSpec.of(
            "list_dir",
            "List the files directly inside a directory with their size and date.",
            string_param("path", "Absolute directory path, e.g. /srv/billing/logs."),
        ),
        ToolSpec.of(
            "stat_file",
            "Show one file's size, modification date, owner and recent access log.",
            string_param("path", "Absolute file path."),
        ),
        ToolSpec.of(
            "move_file",
            "Move a file to a new absolute path (the destination must not exist).",
            string_param("source", "Current absolute path."),
            string_param("destination", "New absolute path."),
        ),
        ToolSpec.of(
            "delete_file",
            "Delete one file.",
            string_param("path", "Absolute file path."),
        ),
    )
    rules = (
        "List a directory with list_dir before changing anything in it.",
        "Log files (.log) modified before the cutoff date move to /archive/<service>/ with "
        "the same file name.",
        "Temporary files (.tmp) in a log directory are deleted, whatever their date.",
        "Files modified on or after the cutoff date stay where they are.",
        "Report the number of archived files and their total size in bytes.",
    )

    def execute(self, state: dict[str, Any], tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run list_dir, stat_file, move_file or delete_file."""
        files: dict[str, Any] = state["files"]
        if tool == "list_dir":
            path = args["path"].rstrip("/") or "/"
            entries = [
                {"name": posixpath.basename(p), "bytes": m["bytes"], "modified": m["modified"]}
                for p, m in sorted(files.items())
                if posixpath.dirname(p) == path
            ]
            if not entries and not any(p.startswith(path + "/") for p in files):
                raise ToolError(f"no such directory: {path}")
            return {"path": path, "entries": entries}
        if tool == "stat_file":
            meta = lookup(state, "files", args["path"], "no such file:")
            return {"path": args["path"], **meta}
        if tool == "move_file":
            source, destination = args["source"], args["destination"]
            meta = lookup(state, "files", source, "no such file:")
            if destination in files:
                raise ToolError(f"destination exists: {destination}")
            if not destination.startswith("/"):
                raise ToolError("destination must be an absolute path")
            files[destination] = files.pop(source)
            return {"moved": source, "to": destination, "bytes": meta["bytes"]}
        # delete_file
        meta = lookup(state, "files", args["path"], "no such file:")
        del files[args["path"]]
        return {"deleted": args["path"], "bytes": meta["bytes"]}

    def filler(self, state: dict[str, Any], rng: random.Random, index: int) -> dict[str, Any]:
        """An access-log line naming one of the task's files."""
        path = rng.choice(sorted(state["files"]))
        return {
            "ts": f"2024-03-{1 + index % 28:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
            "path": path,
            "op": rng.choice(("read", "stat", "append")),
            "user": rng.choice(USERS),
        }

    def canonical(self, state: dict[str, Any]) -> Any:
        """The set of paths with their sizes."""
        return sorted((p, m["bytes"]) for p, m in state["files"].items())

    def generate(self, rng: random.Random, calls: int) -> Scenario:
        """A log directory with old logs, recent logs and temporary files; archive and clean."""
        service = rng.choice(SERVICES)
        logdir = f"/srv/{service}/logs"
        cutoff_day = rng.randint(10, 20)
        cutoff = f"2024-03-{cutoff_day:02d}"
        pads = 1 if calls >= 4 and rng.random() < 0.4 else 0
        actions = calls - 1 - pads
        files: dict[str, Any] = {}
        days = rng.sample(range(1, cutoff_day), min(cutoff_day - 1, actions))
        script: list[Call] = [Call("list_dir", {"path": logdir})]
        archived: list[tuple[str, int]] = []
        notes: list[str] = []
        for n in range(actions):
            size = rng.randint(1_000, 90_000)
            if n > 0 and rng.random() < 0.2:
                path = f"{logdir}/{service}-{n}{rng.randint(100, 999)}.tmp"
                files[path] = {"bytes": size, "modified": f"2024-03-{rng.randint(1, 28):02d}"}
                script.append(Call("delete_file", {"path": path}))
                notes.append(f"delete {path}")
            else:
                day = days[n % len(days)] if n < len(days) else 1 + n % (cutoff_day - 1)
                path = f"{logdir}/{service}-2024-03-{day:02d}.{n}.log"
                files[path] = {"bytes": size, "modified": f"2024-03-{day:02d}"}
                dest = f"/archive/{service}/{posixpath.basename(path)}"
                script.append(Call("move_file", {"source": path, "destination": dest}))
                archived.append((dest, size))
                notes.append(f"archive {path}")
        for _ in range(rng.randint(1, 3)):
            day = rng.randint(cutoff_day, 28)
            path = f"{logdir}/{service}-2024-03-{day:02d}.keep{rng.randint(10, 99)}.log"
            files[path] = {"bytes": rng.randint(1_000, 90_000), "modified": f"2024-03-{day:02d}"}
        for meta in files.values():
            meta["owner"] = rng.choice(USERS)
        for i in range(pads):
            target = archived[i % len(archived)][0] if archived else logdir
            script.append(Call("stat_file" if archived else "list_dir", {"path": target}))
        total = sum(size for _, size in archived)
        instruction = (
            f"Clean up {logdir} following the file policy. The cutoff date is {cutoff}. "
            "Then report how many log files you archived and their total size in bytes."
        )
        answer = f"Archived {len(archived)} log files, {total:,} bytes in total."
        facts = (f"{total:,}",)
        return Scenario({"files": files}, instruction, tuple(script), answer, facts, tuple(notes))
