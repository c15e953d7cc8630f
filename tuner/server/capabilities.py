"""What the installed vLLM accepts: its version, speculative-config fields and methods, flags.

Users run many vLLM versions, and a knob the installed one lacks costs a whole server start to
find out (vLLM 0.26 rejects `disable_eagle_block_drop`, docs/gpu-validation.md). So at study
start tuner asks the vLLM that `TUNER_VLLM_COMMAND` runs, in a subprocess of that command's own
Python (its interpreter, its packages, never ours):

1. Find the Python: the command itself (`python -m vllm...`), or the interpreter named by the
   `vllm` script's shebang (or the `exec PYTHON -m vllm` line of a shell wrapper).
2. A fast look (no vLLM import) gives where vLLM lives and its distribution version; that is
   the cache key, so a reinstall is noticed.
3. On a cache miss, the query imports `vllm.config.SpeculativeConfig` (its dataclass fields and
   the `method` literal), builds vLLM's own `vllm serve` argument parser (its flags) and tries
   `arctic_inference.suffix_decoding` (method "suffix" needs it: `suffix_decoding`). On this
   2-core machine that takes about 40 s, hence the cache (keyed on arctic-inference too).

A command that does not start vLLM (tuner's fake server, `python -m tuner.testing.fake_vllm`)
is not asked: `read_launch_capabilities` returns None and nothing is filtered.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tuner.errors import ConfigError
from tuner.settings import LaunchCommand

__all__ = ["VllmCapabilities", "find_python", "read_capabilities", "read_launch_capabilities"]

_PYTHON_NAME = re.compile(r"^python[0-9.]*$")
_WRAPPER_EXEC = re.compile(r"^\s*exec\s+(\S+)\s+-m\s+vllm\b", re.MULTILINE)

# Where vLLM is and which version its distribution says, without importing vLLM.
_LOOK = r"""
import importlib.metadata as md, importlib.util, json, os, sys
spec = importlib.util.find_spec("vllm")
out = {"executable": sys.executable, "path": os.environ.get("PYTHONPATH", "")}
if spec is not None and spec.origin:
    out["origin"] = spec.origin
    out["mtime"] = os.stat(spec.origin).st_mtime
    dists = md.packages_distributions().get("vllm", [])
    out["dist"] = [[d, md.version(d)] for d in dists]
# arctic-inference (suffix decoding) installed or removed later must not read a stale answer.
arctic = importlib.util.find_spec("arctic_inference")
if arctic is not None and arctic.origin:
    out["arctic_inference"] = [arctic.origin, os.stat(arctic.origin).st_mtime]
print(json.dumps(out))
"""

# Runs inside the vLLM's Python. Module paths moved between versions; each is tried in turn.
_PROBE = r"""
import dataclasses, importlib, json, sys, typing
import vllm
from vllm.config import SpeculativeConfig

def strings(tp):
    out = []
    for arg in typing.get_args(tp):
        out.extend([arg] if isinstance(arg, str) else strings(arg))
    return out

fields = sorted(f.name for f in dataclasses.fields(SpeculativeConfig))
methods = []
try:
    methods = strings(typing.get_type_hints(SpeculativeConfig)["method"])
except Exception:
    pass
if not methods:
    module = sys.modules[SpeculativeConfig.__module__]
    methods = strings(getattr(module, "SpeculativeMethod", None))
flags, source = None, None
for name in ("vllm.utils.argparse_utils", "vllm.utils"):
    try:
        parser_cls = importlib.import_module(name).FlexibleArgumentParser
        break
    except (ImportError, AttributeError):
        parser_cls = None
for name in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
    try:
        make = importlib.import_module(name).make_arg_parser
    except (ImportError, AttributeError):
        continue
    if parser_cls is not None:
        parser = make(parser_cls())
        flags = sorted(k for k in parser._option_string_actions if k.startswith("-"))
        source = name + ".make_arg_parser"
        break
# Method "suffix" runs arctic_inference.suffix_decoding.SuffixDecodingCache (compiled code);
# vLLM itself only asks whether the package is importable, and refuses the config without it.
try:
    from arctic_inference.suffix_decoding import SuffixDecodingCache  # noqa: F401
    suffix = True
except Exception:
    suffix = False
print("TUNER-PROBE " + json.dumps({
    "version": vllm.__version__, "spec_fields": fields, "methods": sorted(set(methods)),
    "flags": flags, "flags_source": source, "suffix_decoding": suffix,
}))
"""


@dataclass(frozen=True)
class VllmCapabilities:
    """What one vLLM install accepts, read from its own classes.

    Attributes:
        version: `vllm.__version__`.
        python: The interpreter the query ran in.
        spec_fields: Field names of `SpeculativeConfig` (the keys `--speculative-config` takes).
        methods: Values its `method` field accepts; empty when they could not be read.
        flags: Option strings of `vllm serve`; None when its parser could not be built.
        suffix_decoding: `arctic_inference.suffix_decoding.SuffixDecodingCache` imports in
            that Python, so method "suffix" can run (vLLM refuses it otherwise).
    """

    version: str
    python: str
    spec_fields: frozenset[str]
    methods: frozenset[str]
    flags: frozenset[str] | None
    suffix_decoding: bool = False

    def has_flag(self, flag: str) -> bool | None:
        """Whether `vllm serve` accepts `flag` (None: the flags are unknown)."""
        return None if self.flags is None else flag in self.flags

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (sorted lists) for the cache and the study's attributes."""
        data = asdict(self)
        for key in ("spec_fields", "methods", "flags"):
            data[key] = sorted(data[key]) if data[key] is not None else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VllmCapabilities:
        """The inverse of `to_json`."""
        flags = data.get("flags")
        return cls(
            version=str(data["version"]),
            python=str(data["python"]),
            spec_fields=frozenset(data["spec_fields"]),
            methods=frozenset(data["methods"]),
            flags=frozenset(flags) if flags is not None else None,
            suffix_decoding=bool(data.get("suffix_decoding", False)),
        )

    def can_run(self, method: str) -> bool:
        """Whether this vLLM accepts speculative `method` and has what it needs to run it
        (method "suffix": arctic-inference). Methods that could not be read count as accepted."""
        if self.methods and method not in self.methods:
            return False
        return self.suffix_decoding if method == "suffix" else True


def _script_python(script: Path) -> str | None:
    try:
        head = script.read_bytes()[:4096].decode("utf-8", errors="replace")
    except OSError:
        return None
    first = head.splitlines()[0] if head else ""
    if first.startswith("#!"):
        words = first[2:].split()
        if words and Path(words[0]).name == "env":
            words = [w for w in words[1:] if not w.startswith("-")]
        if words and _PYTHON_NAME.match(Path(words[0]).name):
            return shutil.which(words[0]) or words[0]
    # A shell wrapper (such as the offline GPU kit's `vllm`) that execs `PYTHON -m vllm...`.
    found = _WRAPPER_EXEC.search(head)
    return (shutil.which(found.group(1)) or found.group(1)) if found else None


def find_python(launch: LaunchCommand) -> str | None:
    """The Python that `launch` runs vLLM in; None when the command does not start vLLM.

    Raises:
        ConfigError: the command is not found, or its interpreter cannot be told.
    """
    argv = launch.argv
    exe = shutil.which(argv[0])
    if exe is None:
        raise ConfigError(
            f"TUNER_VLLM_COMMAND {launch}: {argv[0]} is not found; install vLLM or set "
            "TUNER_VLLM_COMMAND to the command that starts it"
        )
    if _PYTHON_NAME.match(Path(argv[0]).name):
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
        # tuner's own fake server (or any non-vLLM module) has no vLLM to ask.
        return exe if module.split(".")[0] == "vllm" else None
    python = _script_python(Path(exe))
    if python is None:
        raise ConfigError(
            f"TUNER_VLLM_COMMAND {launch}: cannot tell which Python {exe} runs; set it to "
            "'PYTHON -m vllm.entrypoints.openai.api_server' with that vLLM's Python"
        )
    return python


def _run(python: str, code: str, timeout_s: float) -> str:
    try:
        proc = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot ask {python} about its vLLM: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"{python} cannot import its vLLM's config classes: {last}")
    return proc.stdout


def read_capabilities(
    python: str, *, cache_dir: Path, timeout_s: float = 600.0
) -> VllmCapabilities:
    """Ask `python`'s vLLM what it accepts (cached per install under `cache_dir`).

    Raises:
        ConfigError: that Python has no vLLM, or the query fails or times out.
    """
    look = json.loads(_run(python, _LOOK, 60.0))
    if "origin" not in look:
        raise ConfigError(f"{python} has no vllm package; install vLLM for that Python")
    key = hashlib.sha256(json.dumps(look, sort_keys=True).encode()).hexdigest()[:20]
    cached = cache_dir / "vllm-capabilities" / f"{key}.json"
    try:
        return VllmCapabilities.from_json(json.loads(cached.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    out = _run(python, _PROBE, timeout_s)
    line = next((x for x in out.splitlines() if x.startswith("TUNER-PROBE ")), None)
    if line is None:
        raise ConfigError(f"{python}: the vLLM capabilities query printed no answer")
    data = json.loads(line.removeprefix("TUNER-PROBE "))
    caps = VllmCapabilities(
        version=data["version"],
        python=python,
        spec_fields=frozenset(data["spec_fields"]),
        methods=frozenset(data["methods"]),
        flags=frozenset(data["flags"]) if data["flags"] is not None else None,
        suffix_decoding=bool(data.get("suffix_decoding", False)),
    )
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(caps.to_json()))
    os.replace(tmp, cached)
    return caps


def read_launch_capabilities(launch: LaunchCommand, *, cache_dir: Path) -> VllmCapabilities | None:
    """The capabilities of the vLLM `launch` starts; None when it starts no vLLM (a fake)."""
    python = find_python(launch)
    return None if python is None else read_capabilities(python, cache_dir=cache_dir)
