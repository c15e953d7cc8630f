"""Preset files: where the shipped ones are, reading one (with `extends:`), and its errors.

`--model M --gpu G` picks `search_spaces/M/G.yaml`; `--space FILE` takes any file. A file may
extend a sibling (`extends: h200.yaml`: that preset's mapping with this one's keys laid over it).
A YAML or validation error is one `ConfigError` line that names the file, line and column.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tuner.errors import ConfigError
from tuner.study.space.preset import Preset

__all__ = ["known_presets", "load_preset", "preset_dir"]


def preset_dir() -> Path:
    """`search_spaces/` in the source tree, or its copy inside an installed wheel."""
    package_dir = Path(__file__).resolve().parents[2]  # tuner/
    for candidate in (package_dir / "_search_spaces", package_dir.parent / "search_spaces"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"the search_spaces directory is missing next to {package_dir}")


def known_presets() -> list[tuple[str, str]]:
    """(model, gpu) pairs shipped with tuner."""
    root = preset_dir()
    return sorted((p.parent.name, p.stem) for p in root.glob("*/*.yaml"))


def _known_line() -> str:
    return ", ".join(f"--model {m} --gpu {g}" for m, g in known_presets())


def load_preset(
    *, model: str | None = None, gpu: str | None = None, space: Path | None = None
) -> Preset:
    """Load a preset by name pair or from a file; one clear ConfigError when it is wrong."""
    if space is not None:
        path = Path(space)
        if not path.is_file():
            raise ConfigError(f"search-space file {path} does not exist")
    else:
        if not model or not gpu:
            raise ConfigError(f"give --model and --gpu (known: {_known_line()}) or --space FILE")
        path = preset_dir() / model / f"{gpu}.yaml"
        if not path.is_file():
            raise ConfigError(f"no preset for --model {model} --gpu {gpu}; known: {_known_line()}")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error_line(path, exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset is a mapping with model, gpu, space and workload")
    data = _extended(path, data)
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(text, loc)
        value = err.get("input")
        # The offending scalar helps ("got 0"); a whole mapping or list would not fit a line.
        scalar = isinstance(value, str | int | float) and err["type"] != "extra_forbidden"
        got = f" (got {value!r})" if scalar and len(repr(value)) <= 60 else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{path}{line}: {where}: {message}{got}") from None


def _extended(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """`extends: OTHER.yaml` (a preset file beside this one): that preset's mapping with this
    one's keys laid over it, mapping into mapping; a list or a scalar here replaces the other's.
    One level: the other file may not extend a third."""
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    base_path = path.parent / str(base_name)
    if not base_path.is_file():
        raise ConfigError(
            f"{path}: extends: {base_name} is not a preset file beside it; name one of "
            f"{', '.join(sorted(p.name for p in path.parent.glob('*.yaml')))}"
        )
    try:
        base = yaml.safe_load(base_path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error_line(base_path, exc)) from None
    if not isinstance(base, dict) or "extends" in base:
        raise ConfigError(f"{path}: extends: {base_name} must be a whole preset (one level)")
    return _overlay(base, data)


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            value = _overlay(below, value)
        out[key] = value
    return out


def _yaml_error_line(path: Path, exc: yaml.YAMLError) -> str:
    """`file:line:col: what is wrong` from a YAML error (PyYAML prints several lines)."""
    mark = getattr(exc, "problem_mark", None)
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    reason = f"{context}, {problem}" if context else problem
    return f"{path}{where}: not valid YAML: {reason}; fix the file (YAML indents with spaces)"


def _line_of(text: str, loc: tuple[Any, ...]) -> str:
    """`:line:col` of the YAML node at a validation error's location ('' when not found)."""
    try:
        node: Any = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return ""
    mark = node.start_mark if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if kv[0].value == str(key)), None)
            if match is None:
                break
            mark, node = match[0].start_mark, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            mark = node.start_mark
        else:
            break
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
