"""vLLM's compile cache under tuner's cache: one root per install, packed and unpacked whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.server.compile_cache import cache_root, install_key, pack, server_env, unpack
from tuner.server.triton_pool import mirror
from tuner.settings import LaunchCommand

SERVE = LaunchCommand(("/usr/local/bin/vllm", "serve"))
CPU = LaunchCommand(("/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"))


def test_an_install_has_one_stable_root_and_two_installs_have_two() -> None:
    assert install_key(SERVE) == install_key(LaunchCommand(("/usr/local/bin/vllm", "serve")))
    assert install_key(SERVE) != install_key(CPU)
    assert install_key(SERVE).startswith("vllm-")
    assert cache_root(Path("/c"), CPU).parent == Path("/c/vllm")


def test_server_env_points_vllm_and_triton_at_the_root(tmp_path: Path) -> None:
    root = tmp_path / "vllm" / install_key(SERVE)
    env = server_env(root, {"PYTHONPATH": "/site"})
    assert env["VLLM_CACHE_ROOT"] == str(root)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor")
    assert env["TUNER_TRITON_POOL"] == str(root / "triton_pool")
    assert env["PYTHONPATH"].split(":") == [str(root / "python"), "/site"]
    module, cls = env["TRITON_CACHE_MANAGER"].split(":")
    # The module the server imports is there, a copy of the one tuner ships.
    assert (root / "python" / f"{module}.py").read_text().count(f"class {cls}(") == 1


def test_what_the_user_set_is_left_alone(tmp_path: Path) -> None:
    env = server_env(
        tmp_path,
        {
            "VLLM_CACHE_ROOT": "/mine",
            "TRITON_CACHE_MANAGER": "m:C",
            "TORCHINDUCTOR_CACHE_DIR": "/i",
        },
    )
    assert env == {}


def test_a_packed_cache_unpacks_under_another_machines_cache(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    root = cache_root(here, SERVE)
    server_env(root, {})  # writes the pool module, which pack leaves out
    (root / "torch_compile_cache" / "abc123").mkdir(parents=True)
    (root / "torch_compile_cache" / "abc123" / "graph.bin").write_bytes(b"\x00" * 1000)
    (root / "triton_pool" / "KEY").mkdir(parents=True)
    (root / "triton_pool" / "KEY" / "k.cubin").write_bytes(b"cubin")
    files, size = pack(here, tmp_path / "c.tar.gz")
    assert (files, size) == (2, 1005)
    assert unpack(tmp_path / "c.tar.gz", there) == 2
    moved = cache_root(there, SERVE)
    assert (moved / "triton_pool" / "KEY" / "k.cubin").read_bytes() == b"cubin"
    assert unpack(tmp_path / "c.tar.gz", there) == 0  # existing files are kept


def test_an_archive_that_is_not_a_cache_is_refused(tmp_path: Path) -> None:
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("not a cache")
    bad = tmp_path / "bad.tar.gz"
    subprocess.run(["tar", "czf", str(bad), "-C", str(tmp_path), "stuff"], check=True)
    with pytest.raises(ConfigError, match="not a `tuner cache pack` archive"):
        unpack(bad, tmp_path / "c")
    with pytest.raises(ConfigError, match="run a study first"):
        pack(tmp_path / "empty", tmp_path / "x.tar.gz")


def test_the_cli_shows_packs_and_clears(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache_root(cache, SERVE) / "torch_compile_cache" / "h1").mkdir(parents=True)
    run = [sys.executable, "-m", "tuner.cli", "cache"]
    shown = subprocess.run(
        [*run, "show", "--cache-dir", str(cache)], capture_output=True, text=True
    )
    assert "1 compiled config(s)" in shown.stdout
    missing = subprocess.run(
        [*run, "unpack", str(tmp_path / "nope.tgz"), "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")
    cleared = subprocess.run(
        [*run, "clear", "--cache-dir", str(cache)], capture_output=True, text=True
    )
    assert cleared.returncode == 0 and not (cache / "vllm").exists()


def _write_kernel(folder: Path, name: str) -> dict[str, str]:
    """What Triton's FileCacheManager leaves for one compiled kernel: its files and a group file
    that lists them by absolute path."""
    folder.mkdir(parents=True, exist_ok=True)
    children = {}
    for ext in ("cubin", "json", "ttir"):
        (folder / f"{name}.{ext}").write_bytes(f"{name}.{ext}".encode())
        children[f"{name}.{ext}"] = str(folder / f"{name}.{ext}")
    (folder / f"__grp__{name}.json").write_text(json.dumps({"child_paths": children}))
    return children


def _group_complete(folder: Path, name: str) -> bool:
    # Triton's get_group: every child path the group file lists must exist.
    paths = json.loads((folder / f"__grp__{name}.json").read_text())["child_paths"].values()
    return all(Path(p).parent == folder and Path(p).is_file() for p in paths)


def test_a_kernel_one_config_compiled_is_whole_in_the_next_configs_own_folder(
    tmp_path: Path,
) -> None:
    # Config A's start writes a kernel into its per-hash Triton folder; the manager links each
    # file into the pool as Triton puts it. Config B's start asks for the same key: the manager
    # links the pool's files into B's per-hash folder, where Inductor's bundler reads them.
    a, b, pool = tmp_path / "hashA" / "KEY", tmp_path / "hashB" / "KEY", tmp_path / "pool" / "KEY"
    _write_kernel(a, "gdn_fwd")
    (a / "lock").write_text("")
    (a / "tmp.pid_1_x").mkdir()
    names = sorted(p.name for p in a.iterdir())
    added = sum(mirror(str(a), str(pool), [n]) for n in names)
    assert added == 4 and sorted(p.name for p in pool.iterdir()) == sorted(
        n for n in names if n not in ("lock", "tmp.pid_1_x")
    )
    assert _group_complete(pool, "gdn_fwd")
    assert (pool / "gdn_fwd.cubin").stat().st_ino == (a / "gdn_fwd.cubin").stat().st_ino
    assert mirror(str(pool), str(b)) == 4
    assert _group_complete(b, "gdn_fwd") and (b / "gdn_fwd.cubin").read_bytes() == b"gdn_fwd.cubin"
    assert mirror(str(pool), str(b)) == 0  # what the folder has is kept
    assert mirror(str(tmp_path / "no-such-key"), str(b)) == 0


def test_a_pool_of_hard_links_packs_once_and_unpacks_whole(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    root = cache_root(here, SERVE)
    own = root / "torch_compile_cache" / "abc123" / "rank_0_0" / "backbone" / "triton_cache" / "K"
    _write_kernel(own, "k")
    mirror(str(own), str(root / "triton_pool" / "K"))
    files, size = pack(here, tmp_path / "c.tar.gz")
    assert files == 8 and size == sum(len(f"k.{e}") for e in ("cubin", "json", "ttir")) + sum(
        (d / "__grp__k.json").stat().st_size for d in (own, root / "triton_pool" / "K")
    )
    assert unpack(tmp_path / "c.tar.gz", there) == 8
    moved = cache_root(there, SERVE)
    assert _group_complete(moved / "triton_pool" / "K", "k")
    assert (moved / "triton_pool" / "K" / "k.cubin").read_bytes() == b"k.cubin"


def test_the_manager_triton_loads_mirrors_its_folder_and_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs only where Triton is installed (the GPU machine; the CPU build has none): the class
    # Triton instantiates, on Triton's own FileCacheManager.
    pytest.importorskip("triton.runtime.cache")
    from tuner.server.triton_pool import PooledCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "hashA"))
    monkeypatch.setenv("TUNER_TRITON_POOL", str(tmp_path / "pool"))
    first = PooledCacheManager("KEY")
    path = first.put(b"bin", "k.cubin")
    first.put_group("k.json", {"k.cubin": path})
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "hashB"))
    second = PooledCacheManager("KEY")
    assert second.get_group("k.json") == {"k.cubin": str(tmp_path / "hashB" / "KEY" / "k.cubin")}
