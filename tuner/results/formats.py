"""The formats `tuner export` writes a server in: shell, systemd unit, compose service.

Each takes the exported `vllm serve MODEL ...` argv (possibly headed by the preset's
`NAME=value` environment) and returns text; the choice is `tuner.results.export`'s, its
comment lines `tuner.results.export_render`'s.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Final

import yaml

from tuner.errors import StudyError

__all__ = [
    "DEFAULT_IMAGE",
    "IMAGE_ENTRYPOINT",
    "compose_service",
    "image_for",
    "portable",
    "shell_text",
    "split_env",
    "systemd_quote",
    "systemd_unit",
]

DEFAULT_IMAGE: Final = "vllm/vllm-openai:v0.32.0"
_RELEASE = re.compile(r"^(\d+\.\d+\.\d+)")
_SYSTEMD_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# The final stage (`vllm-openai`) of vLLM's docker/Dockerfile: `ENTRYPOINT ["vllm", "serve"]`,
# so a compose `command:` starts at the model.
IMAGE_ENTRYPOINT: Final = ("vllm", "serve")
# Which GPUs a trial's slot had on the measuring machine: true there, wrong anywhere else.
_HOST_ONLY_ENV: Final = frozenset({"CUDA_VISIBLE_DEVICES"})


def split_env(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading `NAME=value` words of a command (the preset's environment) and the rest."""
    env: dict[str, str] = {}
    i = 0
    while i < len(argv) and _ENV_WORD.match(argv[i]):
        name, _, value = argv[i].partition("=")
        env[name] = value
        i += 1
    return env, argv[i:]


def portable(argv: list[str]) -> list[str]:
    """`argv` without the leading `NAME=value` words that only held on the measuring host."""
    env, cmd = split_env(argv)
    return [f"{k}={v}" for k, v in env.items() if k not in _HOST_ONLY_ENV] + cmd


def _lines(argv: list[str], head: int) -> str:
    # One flag (with its value) per line; shlex.quote keeps JSON and paths intact for sh/bash.
    lines = [shlex.join(argv[:head])]
    rest = argv[head:]
    i = 0
    while i < len(rest):
        part = [rest[i]]
        if rest[i].startswith("--") and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            part.append(rest[i + 1])
            i += 1
        lines.append("  " + shlex.join(part))
        i += 1
    return " \\\n".join(lines) + "\n"


def shell_text(argv: list[str], launched: tuple[str, ...] | None) -> str:
    """The command one flag per line; then, when this install started vLLM another way, that."""
    env, cmd = split_env(argv)
    head = len(env) + 3  # NAME=value ... vllm serve MODEL
    text = _lines(argv, head)
    l_env, l_cmd = split_env(portable(list(launched or ())))
    if not l_cmd or l_cmd[:2] == cmd[:2]:
        return text
    # This install started vLLM another way (the CPU build's `vllm` script does not run):
    # give the command that ran here too, on the default port instead of the trial's.
    if "--port" in l_cmd:
        i = l_cmd.index("--port")
        del l_cmd[i : i + 2]
    model_at = l_cmd.index("--model") + 2 if "--model" in l_cmd else len(l_cmd)
    ran = [f"{k}={v}" for k, v in l_env.items()] + l_cmd
    return (
        text
        + "\n# on the install that measured it, `vllm serve` is started as:\n"
        + _lines(ran, min(len(l_env) + model_at, len(ran)))
    )


def systemd_quote(arg: str) -> str:
    """Quote one argument for a systemd `ExecStart=` line (specifiers and `$` escaped)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_PLAIN.match(arg):
        return escaped
    if "'" not in arg and "\\" not in arg:
        return f"'{escaped}'"
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_unit(study_name: str, trial_number: int, argv: list[str]) -> str:
    """A unit file whose ExecStart runs `argv` (through /usr/bin/env, so NAME=value works)."""
    exec_start = " ".join(systemd_quote(a) for a in ["/usr/bin/env", *argv])
    return (
        "[Unit]\n"
        f"Description=vLLM server chosen by tuner (study {study_name}, "
        f"trial {trial_number})\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={exec_start}\n"
        "Restart=on-failure\n"
        "RestartSec=10\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def image_for(vllm_version: str | None) -> str:
    """The vllm/vllm-openai tag of the release that measured (the default tag otherwise)."""
    match = _RELEASE.match(vllm_version or "")
    return f"vllm/vllm-openai:v{match.group(1)}" if match else DEFAULT_IMAGE


def compose_service(argv: list[str], *, image: str, trial_number: int) -> str:
    """A compose file running `argv` on the vLLM image (its entrypoint is `vllm serve`)."""
    env, cmd = split_env(argv)
    if tuple(cmd[: len(IMAGE_ENTRYPOINT)]) != IMAGE_ENTRYPOINT:
        raise StudyError(f"trial #{trial_number}'s command does not start with vllm serve")
    args = list(cmd[len(IMAGE_ENTRYPOINT) :])
    # Inside a container the server must listen on all interfaces; the published port below
    # is what stays bound to 127.0.0.1 on the host.
    if "--host" in args:
        args[args.index("--host") + 1] = "0.0.0.0"  # noqa: S104
    port = args[args.index("--port") + 1] if "--port" in args else "8000"
    service: dict[str, Any] = {
        "image": image,
        # Compose interpolates `$`; doubling it keeps every argument literal.
        "command": [a.replace("$", "$$") for a in args],
    }
    # The GPU reservation below picks the devices; a pinned device list from the machine
    # that measured would point at the wrong cards.
    environment = {k: v.replace("$", "$$") for k, v in env.items() if k not in _HOST_ONLY_ENV}
    if environment:
        service["environment"] = environment
    service |= {
        "ports": [f"127.0.0.1:{port}:{port}"],
        "ipc": "host",
        "volumes": ["${HOME}/.cache/huggingface:/root/.cache/huggingface"],
        "deploy": {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
                }
            }
        },
    }
    return yaml.safe_dump({"services": {"vllm": service}}, sort_keys=False, width=1000)
