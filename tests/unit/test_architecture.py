"""The house rules of the import graph: declared dependencies between packages, no circles.

Every `import` in tuner/ and benchmarks/ counts, including those under `TYPE_CHECKING` and
inside functions: a dependency hidden behind a lazy import is still one a reader has to hold in
their head. docs/architecture.md declares, in two tables this test reads, which of tuner's
packages may import which ("The packages") and which room of the study may import which
("The study's rooms"); an import the tables do not declare fails, and so does a declared one
that no import uses any more (the tables say what the code does, not what it once did).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _section(name: str) -> str:
    """The text between docs/architecture.md's `<!-- NAME: checked by ... -->` and
    `<!-- NAME: end -->` markers."""
    text = ARCHITECTURE.read_text()
    return text.split(f"<!-- {name}: checked by tests/unit/test_architecture.py -->")[1].split(
        f"<!-- {name}: end -->"
    )[0]


def declared_packages(section: str) -> dict[str, set[str]]:
    """The packages table: `| `name` | `dep`, `dep` ... |` rows, "nothing" for none; names
    are tuner's top-level packages and modules (`tuner` is tuner/__init__.py)."""
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`[\w]+`", cells[0]):
            continue
        name = cells[0].strip("`")
        deps = set(re.findall(r"`(\w+)`", cells[1]))
        assert deps or cells[1] == "nothing", f"{name}: write `pkg` names or 'nothing'"
        out[_qualified(name)] = {_qualified(d) for d in deps}
    return out


def declared_rooms(section: str) -> dict[str, set[str]]:
    """The rooms table's last column ("space, preflight, trial" or "nothing") by the room of
    its first module (`study/search/__init__.py` -> tuner.study.search); the facade's row is
    not a room."""
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = re.search(r"`study/([\w]+)(?:/|\.py)", cells[1]) if len(cells) == 3 else None
        if first is None or cells[0] == "the facade":
            continue
        words = [] if cells[2] == "nothing" else [w.strip() for w in cells[2].split(",")]
        out[f"tuner.study.{first.group(1)}"] = {f"tuner.study.{w}" for w in words}
    return out


def _qualified(name: str) -> str:
    return "tuner" if name == "tuner" else f"tuner.{name}"


def _modules(folder: str, prefix: str, root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in sorted((root / folder).rglob("*.py")):
        parts = list(path.relative_to(root / folder).with_suffix("").parts)
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


def _graph(folder: str, prefix: str, root: Path = ROOT) -> dict[str, set[str]]:
    mods = _modules(folder, prefix, root)
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


def package_of(module: str) -> str:
    """tuner's top-level package or module (`tuner.study.search.loop` -> tuner.study)."""
    return ".".join(module.split(".")[:2])


def _collapse(graph: dict[str, set[str]], by: Callable[[str], str]) -> dict[str, set[str]]:
    """The module graph seen between groups (`by` maps a module to its group): every group,
    with the other groups its modules import."""
    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        group = by(a)
        out.setdefault(group, set()).update(b for b in map(by, targets) if b != group)
    return out


def _room_graph() -> dict[str, set[str]]:
    return _collapse(_graph("tuner", "tuner"), room_of)


def mismatches(actual: dict[str, set[str]], declared: dict[str, set[str]]) -> list[str]:
    """What the declared table gets wrong about the import graph: each group it leaves out or
    names without code, each import it does not declare, each declaration no import uses."""
    out = [f"{g}: not in the table" for g in sorted(set(actual) - set(declared))]
    out += [f"{g}: in the table, not in the code" for g in sorted(set(declared) - set(actual))]
    for g in sorted(set(actual) & set(declared)):
        out += [f"{g} imports {d}, undeclared" for d in sorted(actual[g] - declared[g])]
        out += [
            f"{g} declares {d}, which it no longer imports" for d in sorted(declared[g] - actual[g])
        ]
    return out


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
    assert _cycles(_graph("benchmarks", "benchmarks")) == []


def test_the_checker_sees_an_undeclared_function_level_import(tmp_path: Path) -> None:
    # A synthetic tree: `a` imports `b` inside a function only, `b` imports nothing.
    (tmp_path / "pkg" / "a").mkdir(parents=True)
    (tmp_path / "pkg" / "b").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a" / "__init__.py").write_text("def f():\n    from pkg.b import x\n")
    (tmp_path / "pkg" / "b" / "__init__.py").write_text("x = 1\n")
    actual = _collapse(_graph("pkg", "pkg", tmp_path), package_of)
    declared = {"pkg": set(), "pkg.a": set(), "pkg.b": set()}
    assert mismatches(actual, declared) == ["pkg.a imports pkg.b, undeclared"]
    declared["pkg.a"] = {"pkg.b"}
    assert mismatches(actual, declared) == []
    declared["pkg.b"] = {"pkg.a"}
    assert mismatches(actual, declared) == ["pkg.b declares pkg.a, which it no longer imports"]


def test_the_tables_parse_as_written() -> None:
    rows = (
        "| package | may import |\n|---|---|\n| `cli` | `study`, `tuner` |\n| `errors` | nothing |"
    )
    assert declared_packages(rows) == {"tuner.cli": {"tuner.study", "tuner"}, "tuner.errors": set()}
    rooms = "| the search | `study/search/__init__.py`, `study/search/loop.py` | space, trial |"
    assert declared_rooms(rooms) == {
        "tuner.study.search": {"tuner.study.space", "tuner.study.trial"}
    }


def test_every_package_imports_only_what_the_table_declares() -> None:
    actual = _collapse(_graph("tuner", "tuner"), package_of)
    assert mismatches(actual, declared_packages(_section("packages"))) == []


def test_the_declared_packages_have_no_circle() -> None:
    assert _cycles(declared_packages(_section("packages"))) == []


def test_each_study_room_imports_only_what_the_rooms_table_declares() -> None:
    # Within the study; the facade (tuner/study/__init__.py) re-exports from its rooms and is
    # not a room. A room's imports outside the study are its package's (the packages table).
    rooms = {
        room: {r for r in deps if r.startswith("tuner.study.")}
        for room, deps in _room_graph().items()
        if room.startswith("tuner.study.")
    }
    assert mismatches(rooms, declared_rooms(_section("rooms"))) == []


def test_every_study_module_is_in_a_room_and_the_map_names_it() -> None:
    """docs/architecture.md's room table names every module of tuner/study/, and only those."""
    study = _modules("tuner/study", "tuner.study")
    rooms = {room_of(m) for m in study if m != "tuner.study"}
    assert rooms == set(declared_rooms(_section("rooms")))
    named = set(re.findall(r"`(study/[\w/]+\.py)`", _section("rooms")))
    files = {p.relative_to(ROOT / "tuner").as_posix() for p in study.values()}
    assert named == files
