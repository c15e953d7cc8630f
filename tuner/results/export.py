"""`tuner export`: the server a user should run, as a command, a unit file or a compose service.

`choose_export` picks the trial: the best feasible one by successful tasks/hour, unless it does
not beat the baseline (no speculation) beyond both intervals; then the baseline, with the reason.
The published lesson (DESIGN.md section 1) is that on agent traffic "no speculation" is often the
right answer, so a speculative config has to earn its place. `render_export` writes the choice
in one of `FORMATS`, each starting with comment lines that say what was measured.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tuner.errors import ConfigError, StudyError
from tuner.results.loading import StudyResults, TrialRow
from tuner.server.spec import ServerSpec

__all__ = [
    "DEFAULT_IMAGE",
    "FORMATS",
    "ExportChoice",
    "choose_export",
    "render_export",
    "serve_argv",
    "systemd_quote",
]

FORMATS: Final = ("shell", "json", "yaml", "systemd", "compose")
DEFAULT_IMAGE: Final = "vllm/vllm-openai:v0.32.0"
_RELEASE = re.compile(r"^(\d+\.\d+\.\d+)")
_SYSTEMD_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


@dataclass(frozen=True)
class ExportChoice:
    """The trial to export, the best one found, the baseline, and why this one."""

    trial: TrialRow
    best: TrialRow
    baseline: TrialRow | None
    reason: str
    study_name: str
    model: str | None = None
    gpu: str | None = None

    @property
    def fell_back(self) -> bool:
        """True when the baseline is exported instead of a better-scoring config."""
        return self.trial.number != self.best.number


def _tph(t: TrialRow) -> float:
    return t.tasks_per_hour if t.tasks_per_hour is not None else (t.value or 0.0)


def _bounds(t: TrialRow) -> tuple[float, float]:
    # A trial without an interval counts as a point: the comparison stays defined.
    low = t.tasks_per_hour_low if t.tasks_per_hour_low is not None else _tph(t)
    high = t.tasks_per_hour_high if t.tasks_per_hour_high is not None else _tph(t)
    return low, high


def _score(t: TrialRow) -> str:
    low, high = _bounds(t)
    return f"{_tph(t):,.0f} [{low:,.0f}, {high:,.0f}]"


def choose_export(results: StudyResults) -> ExportChoice:
    """Pick the trial to export from a study.

    Raises:
        StudyError: the study has no completed feasible trial yet.
    """
    candidates = [t for t in results.trials if t.exportable]
    if not candidates:
        raise StudyError(
            f"study {results.study_name!r} has no completed feasible trial to export yet; "
            "run `tuner optimize` until one completes"
        )
    # Ties go to the lower trial number: the baseline runs first, and it is the simpler server.
    best = max(candidates, key=lambda t: (_tph(t), -t.number))
    base = results.baseline

    def choice(trial: TrialRow, reason: str) -> ExportChoice:
        return ExportChoice(
            trial=trial,
            best=best,
            baseline=base,
            reason=reason,
            study_name=results.study_name,
            model=results.model,
            gpu=results.gpu,
        )

    if base is None:
        return choice(
            best, f"no baseline was measured, so trial #{best.number} is exported unchallenged"
        )
    if best.number == base.number:
        return choice(
            base,
            f"no speculation (the baseline, #{base.number}) did the most successful tasks/h: "
            f"{_score(base)}",
        )
    best_low, _ = _bounds(best)
    _, base_high = _bounds(base)
    if best_low <= base_high:
        # The published lesson applies to speculation; a memory-only change gets a plainer why.
        lesson = (
            "on agent traffic speculation often costs more (KV cache, prefix reuse) than it gains"
            if best.method != "none"
            else "the baseline's default settings are the simpler server"
        )
        return choice(
            base,
            f"the best config, #{best.number} ({best.label}) at {_score(best)} tasks/h, is not "
            f"better than the baseline (no speculation) at {_score(base)} beyond their intervals "
            f"(its low bound {best_low:,.0f} <= the baseline's high bound {base_high:,.0f}), so "
            f"the baseline is exported: {lesson}",
        )
    return choice(
        best,
        f"#{best.number} beats the baseline (no speculation) beyond their intervals: its low "
        f"bound {best_low:,.0f} > the baseline's high bound {base_high:,.0f} tasks/h",
    )


def serve_argv(trial: TrialRow) -> list[str]:
    """The trial's `vllm serve MODEL ...` argv, every flag it was launched with.

    Raises:
        StudyError: the trial recorded neither its serve command nor its server spec.
    """
    if trial.serve_command:
        return shlex.split(trial.serve_command)
    if trial.server_spec is not None:
        try:
            return shlex.split(ServerSpec.model_validate(trial.server_spec).serve_command())
        except ValidationError as exc:
            raise StudyError(
                f"trial #{trial.number}'s recorded server spec no longer validates: "
                f"{exc.errors()[0].get('msg')}"
            ) from None
    raise StudyError(f"trial #{trial.number} recorded no serve command; re-run the trial")


def _measured(t: TrialRow) -> dict[str, Any]:
    low, high = _bounds(t)
    return {
        "trial": t.number,
        "config": t.label,
        "successful_tasks_per_hour": _tph(t),
        "interval": [low, high],
        "solved": t.successes,
        "tasks": t.tasks,
        "kv_cache_tokens": t.kv_cache_tokens,
        "prompt_tokens_from_cache_pct": t.cache_hit_pct,
        "preemptions": t.preemptions,
    }


def _comment_lines(choice: ExportChoice) -> list[str]:
    t, base = choice.trial, choice.baseline
    where = ", ".join(
        x for x in (f"model {choice.model}" if choice.model else "", choice.gpu or "") if x
    )
    lines = [
        f"tuner export: study {choice.study_name!r}" + (f" ({where})" if where else ""),
        f"trial #{t.number}: {t.label}",
        f"successful tasks/h: {_score(t)} (estimate [interval low, high])",
    ]
    if base is not None and base.number != t.number:
        lines.append(f"baseline (no speculation, #{base.number}): {_score(base)}")
    facts = []
    if t.successes is not None and t.tasks is not None:
        facts.append(f"solved {t.successes} of {t.tasks} tasks")
    kv = f"{t.kv_cache_tokens:,}" if t.kv_cache_tokens is not None else "not measured"
    facts.append(f"KV cache tokens: {kv}")
    hit = f"{t.cache_hit_pct:.0f}%" if t.cache_hit_pct is not None else "not measured"
    facts.append(f"prompt tokens from the cache: {hit}")
    lines.append("; ".join(facts))
    lines.append(f"why this one: {choice.reason}")
    return lines


def _document(choice: ExportChoice, argv: list[str]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "study": choice.study_name,
        "argv": argv,
        "command": shlex.join(argv),
        "measured": _measured(choice.trial),
        "baseline": _measured(choice.baseline) if choice.baseline is not None else None,
        "reason": choice.reason,
    }
    if choice.fell_back:
        doc["best"] = _measured(choice.best)
    return doc


def _shell(argv: list[str]) -> str:
    # One flag (with its value) per line; shlex.quote keeps JSON and paths intact for sh/bash.
    head, rest = argv[:3], argv[3:]
    lines = [shlex.join(head)]
    i = 0
    while i < len(rest):
        part = [rest[i]]
        if rest[i].startswith("--") and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            part.append(rest[i + 1])
            i += 1
        lines.append("  " + shlex.join(part))
        i += 1
    return " \\\n".join(lines) + "\n"


def systemd_quote(arg: str) -> str:
    """Quote one argument for a systemd `ExecStart=` line (specifiers and `$` escaped)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_PLAIN.match(arg):
        return escaped
    if "'" not in arg and "\\" not in arg:
        return f"'{escaped}'"
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _systemd(choice: ExportChoice, argv: list[str]) -> str:
    exec_start = " ".join(systemd_quote(a) for a in ["/usr/bin/env", *argv])
    return (
        "[Unit]\n"
        f"Description=vLLM server chosen by tuner (study {choice.study_name}, "
        f"trial {choice.trial.number})\n"
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


def _image(trial: TrialRow) -> str:
    match = _RELEASE.match(trial.vllm_version or "")
    return f"vllm/vllm-openai:v{match.group(1)}" if match else DEFAULT_IMAGE


def _compose(choice: ExportChoice, argv: list[str]) -> str:
    args = list(argv[2:])  # the image's entrypoint is `vllm serve`
    # Inside a container the server must listen on all interfaces; the published port below
    # is what stays bound to 127.0.0.1 on the host.
    if "--host" in args:
        args[args.index("--host") + 1] = "0.0.0.0"  # noqa: S104
    port = args[args.index("--port") + 1] if "--port" in args else "8000"
    service = {
        "image": _image(choice.trial),
        # Compose interpolates `$`; doubling it keeps every argument literal.
        "command": [a.replace("$", "$$") for a in args],
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


def render_export(choice: ExportChoice, fmt: str = "shell") -> str:
    """The chosen server in format `fmt` (one of `FORMATS`), headed by measurement comments.

    Raises:
        ConfigError: unknown format.
        StudyError: the trial has no recorded command (see `serve_argv`).
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    argv = serve_argv(choice.trial)
    header = "".join(f"# {line}\n" for line in _comment_lines(choice))
    if fmt == "json":
        return json.dumps(_document(choice, argv), indent=2) + "\n"
    if fmt == "yaml":
        return header + yaml.safe_dump(_document(choice, argv), sort_keys=False, width=1000)
    if fmt == "systemd":
        return header + _systemd(choice, argv)
    if fmt == "compose":
        return header + _compose(choice, argv)
    return header + _shell(argv)
