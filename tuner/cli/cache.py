"""`tuner cache`: vLLM's compile cache under tuner's cache, shown, packed and carried."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuner.cli._app import CacheDirOption, console
from tuner.cli._checks import cache_dir as checked_cache

app = typer.Typer(
    help="vLLM's compile cache (torch.compile and Triton) that every start of a study reuses.",
    no_args_is_help=True,
)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


@app.command("show")
def show_cmd(cache_dir: CacheDirOption = None) -> None:
    """Where each vLLM install's compile cache is, how many compiled configs and how big."""
    from tuner.server.compile_cache import summary

    cache = checked_cache(cache_dir)
    rows = summary(cache)
    if not rows:
        console.print(f"no vLLM compile cache under {cache} yet", markup=False)
        return
    for root, hashes, size in rows:
        console.print(
            f"{root}: {hashes} compiled config(s), {_mib(size)}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@app.command("pack")
def pack_cmd(
    out: Annotated[Path, typer.Argument(help="The archive to write (.tar.gz).")],
    cache_dir: CacheDirOption = None,
) -> None:
    """Write the compile cache into one archive, to start warm on another machine of this kind."""
    from tuner.server.compile_cache import pack

    cache = checked_cache(cache_dir)
    files, size = pack(cache, out)
    console.print(
        f"packed {files} files ({_mib(size)}) from {cache / 'vllm'} into {out} "
        f"({_mib(out.stat().st_size)}); on the other machine: tuner cache unpack {out.name}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command("unpack")
def unpack_cmd(
    archive: Annotated[Path, typer.Argument(help="An archive `tuner cache pack` wrote.")],
    cache_dir: CacheDirOption = None,
) -> None:
    """Lay a packed compile cache under this machine's tuner cache (existing files are kept)."""
    from tuner.server.compile_cache import unpack

    cache = checked_cache(cache_dir)
    written = unpack(archive, cache)
    console.print(f"unpacked {written} files into {cache / 'vllm'}", markup=False, highlight=False)


@app.command("clear")
def clear_cmd(cache_dir: CacheDirOption = None) -> None:
    """Delete the compile cache (the next start of every config compiles again)."""
    from tuner.server.compile_cache import remove

    cache = checked_cache(cache_dir)
    freed = remove(cache)
    console.print(f"removed {cache / 'vllm'} ({_mib(freed)})", markup=False, highlight=False)
