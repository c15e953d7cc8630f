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

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import sample_efficiency as se  # noqa: E402

README = ROOT / "README.md"


def _section(text: str) -> str:
    start = text.index(se.BEGIN)
    end = text.index(se.END) + len(se.END)
    return text[start:end]


def _source_json(section: str) -> Path:
    line = next(x for x in section.splitlines() if x.startswith("<!-- source: "))
    md = line.removeprefix("<!-- source: ").removesuffix(" -->").split(",")[0].strip()
    return ROOT / Path(md).with_suffix(".json")


def test_the_readme_section_is_what_the_benchmark_rendered() -> None:
    section = _section(README.read_text())
    doc = json.loads(_source_json(section).read_text())
    assert section == se.render_readme(doc)


def test_the_section_compares_at_equal_total_cost_only() -> None:
    section = _section(README.read_text())
    rows = [x for x in section.splitlines() if x.startswith("| ")]
    assert rows[0].startswith("| total cost | search (split) |")
    assert all(f"noise {n}" in rows[0] for n in ("5%", "10%", "12%"))
    totals = [r.split(" | ")[0].removeprefix("| ") for r in rows[1:]]
    assert totals == ["10%", "10%", "25%", "25%", "50%", "50%"]
    # Nothing priced apart from its confirmation (issue 44): no "regret@B" of a search alone.
    assert "regret@" not in section


def _doc(hit_tuner: float, hit_random: float) -> dict:
    budgets = ("10%", "25%", "50%")

    def row(name: str, hit: float) -> dict:
        return {"search": name, "slots": 1, "hit": dict.fromkeys(budgets, hit), "trials": 9}

    grid = {
        "data": "benchmarks/data/grid-x.json", "configs": 52, "runs": 60, "cost_min": 150.0,
        "best_tasks_per_hour": 1000, "near_best": 5, "seeds": 100, "took_s": 200,
        "partial": False, "goal": {"budget": 0.25, "hit": 0.9, "over_random": 0.2},
    }  # fmt: skip
    rows = [row("tuner", hit_tuner), row("random", hit_random)]
    return {
        "out": "benchmarks/data/sample-efficiency-x.md",
        "command": "python benchmarks/sample_efficiency.py --screening",
        "grid": grid,
        "rows": rows,
        "verdict": [x for x in se.verdict_lines(grid, rows) if x],
    }


def test_the_verdict_says_by_how_much_a_goal_is_missed() -> None:
    missed = "\n".join(_doc(0.80, 0.70)["verdict"])
    assert "tuner: 80% (10 points short), +10 over random (10 short)." in missed
    met = "\n".join(_doc(0.95, 0.70)["verdict"])
    assert "tuner: 95% (met), +25 over random (met)." in met


def test_a_readme_without_the_section_is_refused_and_left_alone(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    doc = tmp_path / "se.json"
    doc.write_text(json.dumps(_doc(0.9, 0.5)))
    out = subprocess.run(
        [sys.executable, str(BENCH / "sample_efficiency.py"), "--render", "--readme", str(readme),
         "--out", str(doc.with_suffix(".md"))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    assert "no section to rewrite" in out.stderr
    assert readme.read_text() == "# x\n"


def test_render_replaces_only_the_section(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{se.BEGIN}\nold table\n{se.END}\nafter\n")
    doc = _doc(0.9, 0.5)
    assert se.write_readme(readme, doc) == 0
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("\nafter\n")
    assert "old table" not in text
    assert _section(text) == se.render_readme(doc)


def test_only_names_a_search_that_exists_and_never_rewrites_the_readme(tmp_path: Path) -> None:
    script = str(BENCH / "sample_efficiency.py")
    readme = tmp_path / "README.md"
    readme.write_text("untouched\n")
    for argv, says in (
        (["--only", "tuner + nothing"], "--only 'tuner + nothing': no such search here"),
        (["--only", "tuner", "--screening", "--readme", str(readme)], "leave out --only"),
    ):
        done = subprocess.run(
            [sys.executable, script, "--seeds", "1", "--jobs", "1", *argv],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, done.stderr
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert readme.read_text() == "untouched\n"
