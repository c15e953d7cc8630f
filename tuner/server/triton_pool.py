"""A Triton cache manager that shares every kernel of a vLLM install between its compile hashes.

Loaded by Triton inside the vLLM server (never by tuner itself): tuner copies this file into
`<vLLM cache root>/python/tuner_triton_pool.py`, puts that folder on the server's PYTHONPATH and
sets `TRITON_CACHE_MANAGER=tuner_triton_pool:PooledCacheManager` and `TUNER_TRITON_POOL`
(`tuner.server.compile_cache.server_env`). It imports nothing but the standard library and
Triton, so it works in whatever Python runs vLLM, with or without tuner installed there.

Why: vLLM points `TRITON_CACHE_DIR` at a folder per compile hash
(`torch_compile_cache/<hash>/triton_cache`, vllm/compilation/compiler_interface.py), and the hash
changes with the speculative config. Two configs of one model (no speculation and n-gram, say)
then JIT-compile and autotune the same Triton kernels (the Gated DeltaNet and Mamba kernels of a
hybrid, the attention backends', Inductor's) twice: on the 27B-shaped hybrid that was most of a
3-4 minute start on an H200. Triton's cache is content-addressed (the key hashes the kernel's
source, its constants and signature, the target GPU and Triton's own build), so one pool is as
safe as Triton's default `~/.triton/cache`, which is also one folder for everything.

Why a mirror and not a move: Inductor's `TritonBundler` reads and writes a compiled graph's
kernels at `$TRITON_CACHE_DIR/<kernel hash>` itself, past any cache manager (torch
`_inductor/triton_bundler.py`). When this manager kept kernels only in the pool (2026-12-04), the
per-hash folder stayed empty, the compile-cache entry saved no kernels, and the same config's
second start (explain's control on an H200) spent 93 s compiling and autotuning them again in its
first profiling run. So Triton's own per-hash folder stays complete, as without tuner, and the
pool is a second copy by hard link: a key's files are linked in from the pool when Triton first
asks for that key, and every file Triton writes is linked into the pool.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from typing import Any

POOL_ENV = "TUNER_TRITON_POOL"
GROUP_PREFIX = "__grp__"


def mirror(src: str, dst: str, names: list[str] | None = None) -> int:
    """Put in `dst` each file of `src` (or only `names`) that `dst` lacks; files added.

    Hard links where the file system allows (no file here is changed in place: Triton writes a
    new file and renames it over), else copies. A group file (`__grp__*`) lists its members by
    absolute path, so it is written again with the paths into `src` turned into `dst`'s.
    Writes go through a temporary name and a rename, so a reader sees a whole file or none.
    """
    if names is None:
        try:
            names = os.listdir(src)
        except FileNotFoundError:
            return 0
    added = 0
    for name in names:
        if name == "lock" or name.startswith("tmp."):
            continue
        source, target = os.path.join(src, name), os.path.join(dst, name)
        if os.path.exists(target) or not os.path.isfile(source):
            continue
        os.makedirs(dst, exist_ok=True)
        tmp = os.path.join(dst, f"tmp.tuner_{os.getpid()}_{uuid.uuid4().hex}")
        try:
            if name.startswith(GROUP_PREFIX):
                _write_group(source, tmp, src, dst)
            else:
                try:
                    os.link(source, tmp)
                except OSError:
                    shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        added += 1
    return added


def _write_group(source: str, tmp: str, src: str, dst: str) -> None:
    with open(source) as f:
        data = json.load(f)
    data["child_paths"] = reroot(data.get("child_paths") or {}, src, dst)
    with open(tmp, "w") as f:
        json.dump(data, f)


def reroot(paths: dict[str, str], src: str, dst: str) -> dict[str, str]:
    """A group's member paths, each one that `src` holds (by name) moved to `dst`.

    Triton keeps a kernel's files beside its group file, so a member is found by its name in the
    group's folder; a path written on another machine or under another cache root still
    resolves.
    """
    return {
        child: os.path.join(dst, os.path.basename(path))
        if os.path.isfile(os.path.join(src, os.path.basename(path)))
        else path
        for child, path in paths.items()
    }


def __getattr__(name: str) -> object:
    """`PooledCacheManager`, made on first use: Triton imports this module and asks for the
    class by name (`TRITON_CACHE_MANAGER=module:Class`), while tuner imports the module for
    `mirror` and `reroot` alone and must not import Triton (the CPU build has none)."""
    if name != "PooledCacheManager":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = _manager_class()
    globals()[name] = cls
    return cls


def _manager_class() -> type:
    from triton.runtime.cache import FileCacheManager

    class PooledCacheManager(FileCacheManager):  # type: ignore[misc]  # triton ships no types
        """Triton's file cache (`$TRITON_CACHE_DIR/<key>`), mirrored to the pool's `<key>`."""

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            super().__init__(key, override=override, dump=dump)
            pool = os.environ.get(POOL_ENV)
            self.pool_dir = os.path.join(pool, key) if pool and not override and not dump else None
            if self.pool_dir is not None:
                # The pool only saves time: Triton's own folder stands alone if it fails.
                with contextlib.suppress(OSError):
                    mirror(self.pool_dir, self.cache_dir)

        def put(self, data: Any, filename: str, binary: bool = True) -> str:
            path = super().put(data, filename, binary)
            if self.pool_dir is not None:
                with contextlib.suppress(OSError):
                    mirror(self.cache_dir, self.pool_dir, [filename])
            return str(path)

    return PooledCacheManager
