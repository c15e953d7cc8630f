"""A Triton cache manager that keeps every kernel of a vLLM install in one pool.

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
"""

from __future__ import annotations

import os

from triton.runtime.cache import FileCacheManager

POOL_ENV = "TUNER_TRITON_POOL"


class PooledCacheManager(FileCacheManager):
    """Triton's file cache, rooted at `$TUNER_TRITON_POOL` instead of `$TRITON_CACHE_DIR`."""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        super().__init__(key, override=override, dump=dump)
        pool = os.environ.get(POOL_ENV)
        if pool and not override and not dump:
            self.cache_dir = os.path.join(pool, key)
            self.lock_path = os.path.join(self.cache_dir, "lock")
            os.makedirs(self.cache_dir, exist_ok=True)
