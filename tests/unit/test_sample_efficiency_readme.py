"""The README's sample-efficiency section is the benchmark's, word for word.

`benchmarks/sample_efficiency.py --readme README.md` renders the section from the run's result
and replaces the README's lines between its two markers; `--render` does it again from the JSON
the run wrote. A hand edit of the section, or a section left behind by a newer run, fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import _se_write as write

ROOT = Path(__file__).resolve().parents[2]

README = ROOT / "README.md"


def _section(text: str) -> str:
    start = text.index(write.BEGIN)
    end = text.index(write.END) + len(write.END)
    return text[start:end]


def _source_json(section: str) -> Path:
    line = next(x for x in section.splitlines() if x.startswith("<!-- source: "))
    md = line.removeprefix("<!-- source: ").removesuffix(" -->").split(",")[0].strip()
    return ROOT / Path(md).with_suffix(".json")


def test_the_readme_section_is_what_the_benchmark_rendered() -> None:
    section = _section(README.read_text())
    doc = json.loads(_source_json(section).read_text())
    assert section == write.render_readme(doc)


def test_the_section_compares_at_equal_total_cost_only() -> None:
    section = _section(README.read_text())
    rows = [x for x in section.splitlines() if x.startswith("| ")]
    assert rows[0].startswith("| total cost | search (split) |")
    assert all(f"noise {n}" in rows[0] for n in ("5%", "10%", "12%"))
    totals = [r.split(" | ")[0].removeprefix("| ") for r in rows[1:]]
    assert totals == ["10%", "10%", "25%", "25%", "50%", "50%"]
    # Nothing priced apart from its confirmation (issue 44): no "regret@B" of a search alone.
    assert "regret@" not in section


TOTAL = ROOT / "benchmarks" / "data" / "sample-efficiency-total-smollm2-135m-cpu-large.json"


def test_a_readme_without_the_section_is_refused_and_left_alone(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    doc = tmp_path / "se.json"
    doc.write_text(TOTAL.read_text())
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.sample_efficiency", "--render", "--readme", str(readme),
         "--out", str(doc.with_suffix(".md"))],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2
    assert "no section to rewrite" in out.stderr
    assert readme.read_text() == "# x\n"


def test_render_replaces_only_the_section(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{write.BEGIN}\nold table\n{write.END}\nafter\n")
    doc = json.loads(TOTAL.read_text())
    assert write.write_readme(readme, doc) == 0
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("\nafter\n")
    assert "old table" not in text
    assert _section(text) == write.render_readme(doc)


def test_render_without_a_readme_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.sample_efficiency", "--render"],
        capture_output=True, text=True, check=False, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2 and "name it with --readme" in done.stderr
