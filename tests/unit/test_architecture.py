"""The house rules of the import graph: one-way flow between packages, no import circles.

Every `import` in tuner/ and benchmarks/ counts, including those under `TYPE_CHECKING` and
inside functions: a circle hidden behind a lazy import is still a circle a reader has to hold
in their head. The study package is split into rooms by when things happen (docs/architecture.md,
"The study's rooms"); each room may import only the rooms its `__init__` names.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What each room of tuner.study may import of tuner.study (its __init__ docstring says why).
STUDY_ROOMS: dict[str, set[str]] = {
    "tuner.study.space": set(),
    "tuner.study.preflight": {"tuner.study.space"},
    "tuner.study.trial": set(),
    "tuner.study.search": {"tuner.study.space", "tuner.study.preflight", "tuner.study.trial"},
    "tuner.study.stages": {"tuner.study.space", "tuner.study.search", "tuner.study.trial"},
}
# Packages below the study: they never import it (the record types, the measurement, the
# results readers). `tuner.testing` (named fakes) and `tuner.cli` sit above it.
BELOW_STUDY = (
    "tuner.attrs",
    "tuner.errors",
    "tuner.records",
    "tuner.settings",
    "tuner.metrics",
    "tuner.server",
    "tuner.workload",
    "tuner.storage",
    "tuner.results",
    "tuner.models",
)


def _modules(folder: str, prefix: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([prefix, *parts]) if prefix else ".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every module of `known` that the file imports, wherever the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        yield from (n for n in names if n in known and n != name)


def _graph(folder: str, prefix: str) -> dict[str, set[str]]:
    mods = _modules(folder, prefix)
    return {m: set(_imports(m, p, set(mods))) for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def room_of(module: str) -> str:
    """tuner.study's rooms, else the top-level package (`tuner.results.export` -> results)."""
    parts = module.split(".")
    if parts[:2] == ["tuner", "study"] and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _room_graph() -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for a, targets in _graph("tuner", "tuner").items():
        for b in targets:
            ra, rb = room_of(a), room_of(b)
            if ra != rb:
                rooms.setdefault(ra, set()).add(rb)
    return rooms


def test_the_cycle_finder_sees_a_circle() -> None:
    # The checks below pass on "no cycles": this one shows the finder would say otherwise.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_tuner_modules() -> None:
    assert _cycles(_graph("tuner", "tuner")) == []


def test_no_import_circle_between_packages() -> None:
    # The study's facade (tuner/study/__init__.py) re-exports from its rooms; it is not a room.
    rooms = {k: v - {"tuner.study"} for k, v in _room_graph().items() if k != "tuner.study"}
    assert _cycles(rooms) == []


def test_no_import_circle_between_benchmarks() -> None:
    assert _cycles(_graph("benchmarks", "")) == []


def test_each_study_room_imports_only_what_its_init_allows() -> None:
    rooms = _room_graph()
    for room, allowed in STUDY_ROOMS.items():
        study_deps = {r for r in rooms.get(room, set()) if r.startswith("tuner.study")}
        assert study_deps <= allowed, f"{room} imports {sorted(study_deps - allowed)}"


def test_the_packages_below_the_study_never_import_it() -> None:
    rooms = _room_graph()
    for package in BELOW_STUDY:
        study_deps = sorted(r for r in rooms.get(package, set()) if r.startswith("tuner.study"))
        assert study_deps == [], f"{package} imports {study_deps}"


def test_record_types_import_nothing_that_fills_them() -> None:
    # tuner.records holds what workers measure; the code that measures imports it, not back.
    assert _room_graph().get("tuner.records", set()) == set()


def test_every_study_module_is_in_a_room_and_the_map_names_it() -> None:
    """docs/architecture.md's room table names every module of tuner/study/, and only those."""
    study = _modules("tuner/study", "tuner.study")
    rooms = {room_of(m) for m in study if m != "tuner.study"}
    assert rooms == set(STUDY_ROOMS)
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("<!-- rooms: checked by tests/unit/test_architecture.py -->")[1]
    section = section.split("<!-- rooms: end -->")[0]
    named = set(re.findall(r"`(study/[\w/]+\.py)`", section))
    files = {p.relative_to(ROOT / "tuner").as_posix() for p in study.values()}
    assert named == files
