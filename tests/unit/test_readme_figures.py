"""Every figure the README quotes comes from a file a script in the repository wrote.

The convention (stated in the README's last lines too): a block of the README (a paragraph, a
list item, a table, a fenced code block) that quotes figures is preceded by a line

    <!-- source: benchmarks/data/x.json, docs/first-run.md -->

and every number in that block must appear in one of the named files. Outside such blocks the
README may hold no figure: a number with a unit (%, s, min, h, ms, GB, MB, tasks/h, tokens,
runs, trials, cores, ...) or a ratio (x1.34, 1.3x). It appears in a source when the source holds
the same number as written, or one that rounds to it (168.165 for "168 s"; 0.0038 for "0.4%"). A
source must be a file a script writes: under benchmarks/data/, or a docs file whose opening
lines (the first five) say "written by" the script. A figure in a block without a source
comment fails, and so does a source that does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

SOURCE = re.compile(r"^<!-- source: (.+?) -->$")
UNITS = (
    r"%|ms|s|min|minutes|h|hours|GB|MB|kB|GiB|MiB|tasks/h|tasks/hour|tokens/s|tokens|tasks"
    r"|runs?|trials?|cores|seeds|configs|lines|passed|failed|skipped"
)
NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?<![\w.\-/])(?:x(?P<ratio>{NUMBER})|(?P<num>{NUMBER})(?:(?P<times>x)(?!\w)|\s?(?P<unit>{UNITS})(?![\w/])))"
)
SOURCE_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE]-?\d+)?(?P<pct>%)?")


def blocks(text: str) -> list[tuple[list[str], str, int]]:
    """(source paths, block text, first line number) for each block of the README."""
    out: list[tuple[list[str], str, int]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        sources: list[str] = []
        match = SOURCE.match(lines[i].strip())
        if match:
            sources = [s.strip() for s in match.group(1).split(",") if s.strip()]
            i += 1
        start = i
        if i < len(lines) and lines[i].startswith("```"):
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                i += 1
            i += 1
        else:
            while i < len(lines) and lines[i].strip() and not SOURCE.match(lines[i].strip()):
                i += 1
        out.append((sources, "\n".join(lines[start:i]), start + 1))
    return out


BARE = re.compile(rf"(?<![\w\-/.])x?(?P<num>{NUMBER})(?P<pct>%)?")


def figures(block: str, *, every_number: bool = False) -> list[tuple[str, float, int, bool]]:
    """(as written, value, decimals, is a percent) of each figure in a block; with
    `every_number`, of every number in it (a block that names its source)."""
    found = []
    pattern = BARE if every_number else FIGURE
    for m in pattern.finditer(block):
        raw = m.groupdict().get("ratio") or m.group("num")
        plain = raw.replace(",", "").rstrip(".")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        percent = bool(m.groupdict().get("pct")) or m.groupdict().get("unit") == "%"
        found.append((m.group(0), float(plain), decimals, percent))
    return found


def source_numbers(path: Path) -> list[tuple[float, bool]]:
    """Every number in the file, and whether a % sign follows it."""
    values = []
    for m in SOURCE_NUMBER.finditer(path.read_text()):
        try:
            values.append((float(m.group(0).rstrip("%").replace(",", "")), bool(m.group("pct"))))
        except ValueError:
            continue
    return values


def appears(value: float, decimals: int, percent: bool, numbers: list[tuple[float, bool]]) -> bool:
    """A percent matches a percent, or a fraction x 100; any other figure, a number."""
    for n, is_pct in numbers:
        candidates = ([n] if is_pct else []) + [n * 100] if percent else [n]
        if any(round(abs(c), decimals) == value for c in candidates):
            return True
    return False


def written_by_a_script(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith("benchmarks/data/"):
        return True
    opening = "\n".join(path.read_text().splitlines()[:5]).lower()
    return rel.startswith("docs/") and "written by" in opening


def check(text: str) -> list[str]:
    """Every problem with the README's figures, one line each."""
    problems = []
    for sources, block, line in blocks(text):
        if SOURCE.match(block.strip()):
            continue
        found = figures(block)
        if not found:
            continue
        if not sources:
            shown = ", ".join(f[0] for f in found[:3])
            problems.append(f"README.md:{line}: figures without a source comment: {shown}")
            continue
        numbers: list[tuple[float, bool]] = []
        for name in sources:
            path = ROOT / name
            if not path.is_file():
                problems.append(f"README.md:{line}: source {name} does not exist")
                continue
            if not written_by_a_script(path):
                problems.append(f"README.md:{line}: source {name} is not written by a script")
            numbers += source_numbers(path)
        for written, value, decimals, percent in figures(block, every_number=True):
            if not appears(value, decimals, percent, numbers):
                problems.append(f"README.md:{line}: {written!r} is not in {', '.join(sources)}")
    return problems


def test_every_readme_figure_is_in_the_file_named_next_to_it() -> None:
    assert check(README.read_text()) == []


def test_the_readme_stays_short() -> None:
    assert len(README.read_text().splitlines()) <= 215


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ("A trial takes about 80 s here.\n", "figures without a source comment: 80 s"),
        (
            "<!-- source: benchmarks/data/repeatability-smollm2-135m-cpu.json -->\n"
            "paired ratio CV 0.4%, baseline 539 and 554 tasks/h, x1.345\n",
            None,
        ),
        (
            "<!-- source: benchmarks/data/repeatability-smollm2-135m-cpu.json -->\n"
            "paired ratio CV 2.2%\n",
            "'2.2%' is not in benchmarks/data/repeatability-smollm2-135m-cpu.json",
        ),
        ("<!-- source: docs/nothing.md -->\n1,000 tasks/h\n", "docs/nothing.md does not exist"),
        (
            "<!-- source: docs/decisions.md -->\n3 runs\n",
            "docs/decisions.md is not written by a script",
        ),
        ("Six commands, smollm2-135m on h200, port 8080.\n", None),
    ],
)
def test_the_checker_catches_what_it_should(block: str, problem: str | None) -> None:
    found = check(block)
    if problem is None:
        assert found == []
    else:
        assert found and problem in found[0], found
