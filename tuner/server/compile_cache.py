"""Where vLLM keeps what it compiles, so that no start of a study compiles twice.

A vLLM start compiles the model (torch.compile: Dynamo, Inductor) and JIT-compiles and
autotunes Triton kernels; on a GPU that is most of the start (2-4 minutes of a 3-5 minute start
of the 27B-shaped hybrid on an H200, docs/vllm-facts.md). vLLM caches both on disk, under
`VLLM_CACHE_ROOT` (default `~/.cache/vllm`), one folder per compile hash.

tuner gives each vLLM install a cache root of its own under tuner's cache
(`$TUNER_CACHE_DIR/vllm/<install>`), so every trial of a study, the confirmation's re-starts,
`tuner explain`'s controls and the next study of the model find what an earlier start compiled,
and `tuner cache pack` / `tuner cache unpack` carry it to another machine of the same kind. It
also points Triton at one pool per install (`triton_pool.py`), so configs whose compile hashes
differ still share their Triton kernels. A `VLLM_CACHE_ROOT` or `TRITON_CACHE_MANAGER` the user
set is left alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
from collections.abc import Mapping
from pathlib import Path

from tuner.errors import ConfigError
from tuner.server.triton_pool import GROUP_PREFIX, reroot
from tuner.settings import LaunchCommand

__all__ = [
    "POOL_MODULE",
    "cache_root",
    "install_key",
    "pack",
    "server_env",
    "summary",
    "unpack",
]

# The module name Triton imports inside the server (TRITON_CACHE_MANAGER=module:Class).
POOL_MODULE = "tuner_triton_pool"
_POOL_SOURCE = Path(__file__).with_name("triton_pool.py")
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def install_key(command: LaunchCommand) -> str:
    """A folder name for one vLLM install: its program's name and a hash of the command.

    `vllm serve` found at /usr/local/bin/vllm gives the same key on every machine that has it
    there, so a cache made on one machine of a kind is found on another.
    """
    program = Path(command.argv[0]).name
    module = next((a for a in command.argv if a.startswith("vllm.")), "")
    name = _SLUG.sub("-", f"{program}-{module}".strip("-"))[:40] or "vllm"
    digest = hashlib.sha256("\0".join(command.argv).encode()).hexdigest()[:10]
    return f"{name}-{digest}"


def cache_root(tuner_cache: Path, command: LaunchCommand) -> Path:
    """This install's vLLM cache root under tuner's cache."""
    return tuner_cache / "vllm" / install_key(command)


def server_env(root: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a server needs to use `root` (none that `environ` already sets).

    `VLLM_CACHE_ROOT` (torch.compile artifacts, Inductor's and Triton's per-hash caches),
    `TORCHINDUCTOR_CACHE_DIR` (`root/inductor`: Inductor's cache where vLLM does not set its
    own, as on the CPU build) and the shared Triton pool: `root/triton_pool`, loaded through
    `root/python` on PYTHONPATH.
    """
    env: dict[str, str] = {}
    if "VLLM_CACHE_ROOT" not in environ:
        env["VLLM_CACHE_ROOT"] = str(root)
    if "TORCHINDUCTOR_CACHE_DIR" not in environ:
        # The CPU build's compile (its warm-up) goes to Inductor's default cache,
        # /tmp/torchinductor_<user>, outside VLLM_CACHE_ROOT: here instead, kept and packed
        # with the rest. On a GPU vLLM points Inductor at its per-hash folder itself.
        env["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    if "TRITON_CACHE_MANAGER" not in environ:
        python = root / "python"
        python.mkdir(parents=True, exist_ok=True)
        target = python / f"{POOL_MODULE}.py"
        source = _POOL_SOURCE.read_bytes()
        if not target.is_file() or target.read_bytes() != source:
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(source)
            tmp.replace(target)
        path = environ.get("PYTHONPATH", "")
        env["PYTHONPATH"] = f"{python}{os.pathsep}{path}" if path else str(python)
        env["TRITON_CACHE_MANAGER"] = f"{POOL_MODULE}:PooledCacheManager"
        env["TUNER_TRITON_POOL"] = str(root / "triton_pool")
    return env


def _size(path: Path) -> int:
    """Bytes on disk under `path`, a hard-linked file once (the Triton pool links its files)."""
    seen: dict[tuple[int, int], int] = {}
    for p in path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def summary(tuner_cache: Path) -> list[tuple[Path, int, int]]:
    """Every install's cache root under tuner's cache: (path, compile hashes, bytes)."""
    out = []
    base = tuner_cache / "vllm"
    for root in sorted(p for p in base.glob("*") if p.is_dir()):
        hashes = [p for p in (root / "torch_compile_cache").glob("*") if p.is_dir()]
        out.append((root, len(hashes), _size(root)))
    return out


def pack(tuner_cache: Path, out: Path) -> tuple[int, int]:
    """Write every install's cache root into `out` (a .tar.gz); (files, bytes) packed.

    Relative paths (`vllm/<install>/...`) so `unpack` can lay them under another machine's
    tuner cache. The pool's module copy is left out: every start writes it again. A file the
    Triton pool shares with a compile hash's folder (a hard link) is stored once and its second
    name as a link, so bytes count it once.
    """
    base = tuner_cache / "vllm"
    if not base.is_dir():
        raise ConfigError(
            f"no vLLM compile cache under {tuner_cache} (nothing started with this cache "
            "yet): run a study first, or set --cache-dir"
        )
    files = size = 0
    seen: set[tuple[int, int]] = set()
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.parent.name != "python":
                tar.add(path, arcname=str(path.relative_to(tuner_cache)), recursive=False)
                files += 1
                st = path.stat()
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    size += st.st_size
    tmp.replace(out)
    return files, size


def unpack(archive: Path, tuner_cache: Path) -> int:
    """Lay a `pack` archive under `tuner_cache`; files written (existing ones are kept)."""
    if not archive.is_file():
        raise ConfigError(f"{archive} is not a file: give a `tuner cache pack` archive")
    written = 0
    groups: list[Path] = []
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            bad = [m.name for m in members if not m.name.startswith("vllm/") or ".." in m.name]
            if bad:
                raise ConfigError(
                    f"{archive} holds {bad[0]!r}, outside vllm/: not a `tuner cache pack` archive"
                )
            for member in members:
                linked = member.islnk() and member.linkname.startswith("vllm/")
                if not (member.isfile() or linked) or (tuner_cache / member.name).exists():
                    continue
                tar.extract(member, tuner_cache, filter="data")
                written += 1
                if Path(member.name).name.startswith(GROUP_PREFIX):
                    groups.append(tuner_cache / member.name)
    except tarfile.TarError as exc:
        raise ConfigError(f"{archive} is not a readable archive ({exc})") from exc
    for group in groups:
        _reroot_group(group)
    return written


def _reroot_group(group: Path) -> None:
    """Point a Triton group file's members at its own folder: it was written with the absolute
    paths of the machine (and cache root) that packed it."""
    try:
        data = json.loads(group.read_text())
    except (OSError, ValueError):
        return
    folder = str(group.parent)
    data["child_paths"] = reroot(data.get("child_paths") or {}, folder, folder)
    tmp = group.with_name(f"tmp.tuner_{os.getpid()}")
    tmp.write_text(json.dumps(data))
    tmp.replace(group)


def remove(tuner_cache: Path) -> int:
    """Delete every install's cache root; bytes freed."""
    base = tuner_cache / "vllm"
    if not base.is_dir():
        return 0
    freed = _size(base)
    shutil.rmtree(base)
    return freed
