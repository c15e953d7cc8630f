"""A new user's first run, recorded: `tuner optimize` with its output going to a file, timed,
then `tuner export` on the study it made; writes docs/first-run.md, which the README quotes.

    python scripts/first_run.py [--lock /tmp/tuner-heavy.lock] [--out docs/first-run.md]
        [-- TUNER-OPTIMIZE-ARGS...]
    python scripts/first_run.py --existing sqlite:///COPY.db   # record a study already run
    python scripts/first_run.py --estimate   # only the main command's estimate, from the preset

`--existing` runs nothing: it records a real study someone ran (pass a copy of its file), its
timeline from Optuna's own trial timestamps, and what `tuner export` prints for it.
`--estimate` runs nothing either: it rewrites the one plan block of `--out` (the line the main
command prints at its start, a function of the budget, the preset and its recorded run seconds) and
leaves the recorded run as it was, for a change of the preset's defaults.

Without arguments after `--` it runs the README's main command (`README_ARGS`: `--model
smollm2-135m --gpu cpu --budget 20m`: a verdict within 20 min on any CPU). The study goes to a
fresh SQLite file in a temp directory. `--lock FILE` takes that lock (flock) before starting,
and the clock starts once it is held. The file holds the command, the machine (cores, load
average at the start), the wall time, everything the command printed (its progress lines:
output to a file is not a terminal), the export, and the plan line that the README's main
command prints at its start, so the README's figures about a first run all come from here
(tests/unit/test_readme_figures.py checks them).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.study.search.estimate import minutes  # noqa: E402
from tuner.study.space import load_preset  # noqa: E402

# The README's main command names its time: `--budget 20m` plans search and confirmation from a
# run's cost (the preset's recorded runs, then this machine's measured ones) and ends with its
# verdict inside the budget on any CPU, where a fixed count of runs (`--n-trials 5 --confirm 1,2`)
# took 35 min on the slowest CPU seen (a Zen 3 without AVX-512, issue 33) and 25 on a Zen 4.
README_BUDGET = "20m"
README_ARGS = ["--model", "smollm2-135m", "--gpu", "cpu", "--budget", README_BUDGET]
README_COMMAND = "tuner optimize " + " ".join(README_ARGS)


def _tuner(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuner.cli", *args]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, help="flock this file while the study runs")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "first-run.md")
    parser.add_argument("--existing", help="record this storage's study instead of running one")
    parser.add_argument(
        "--estimate", action="store_true", help="rewrite only the main command's estimate"
    )
    parser.add_argument("args", nargs="*", help="tuner optimize arguments (after --)")
    ns = parser.parse_args()
    if ns.estimate:
        return _estimate_only(ns.out)
    if ns.existing:
        return _existing(ns.existing, ns.out)
    args = ns.args or README_ARGS
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tuner-first-run-")))
        storage = f"sqlite:///{tmp / 'tuner.db'}"
        env = {**os.environ, "TUNER_STORAGE": storage, "PYTHONUNBUFFERED": "1"}
        log = tmp / "optimize.log"
        if ns.lock is not None:
            lock = stack.enter_context(ns.lock.open("a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        load = os.getloadavg()
        t0 = time.monotonic()
        with log.open("w") as out:
            code = subprocess.run(
                _tuner("optimize", *args), env=env, stdout=out, stderr=subprocess.STDOUT
            ).returncode
        wall = time.monotonic() - t0
        if ns.lock is not None:
            fcntl.flock(lock, fcntl.LOCK_UN)
        printed = log.read_text()
        export = subprocess.run(_tuner("export"), env=env, capture_output=True, text=True)
    readme_estimate = _readme_estimate()
    command = "tuner optimize " + " ".join(args)
    lines = [
        "# A first run, recorded (written by scripts/first_run.py)",
        "",
        f"Command: `{command}`, output to a file (not a terminal), a fresh SQLite file.",
        f"Machine: {_cpu()}, {os.cpu_count()} cores, load average {load[0]:.1f} at the start; "
        f"recorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"Exit status {code}; wall time {wall:.0f} s ({minutes(wall)}).",
        "",
        f"What the README's main command (`{README_COMMAND}`) prints as its first line:",
        "",
        "```",
        readme_estimate,
        "```",
        "",
        "## What the command printed",
        "",
        "```",
        printed.rstrip(),
        "```",
        "",
        f"## `tuner export` on that study (exit status {export.returncode})",
        "",
        "```",
        (export.stdout + export.stderr).rstrip(),
        "```",
    ]
    ns.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {ns.out}: exit {code}, {wall:.0f} s")
    return code


ESTIMATE_INTRO = "prints as its first line:"


def _estimate_only(out: Path) -> int:
    """Replace the estimate block of `out` (the fenced line after ESTIMATE_INTRO)."""
    lines = out.read_text().splitlines() if out.is_file() else []
    at = next((i for i, line in enumerate(lines) if line.endswith(ESTIMATE_INTRO)), None)
    if at is None or lines[at + 2 : at + 3] != ["```"] or lines[at + 4 : at + 5] != ["```"]:
        print(f"{out}: no estimate block to rewrite; record a run first", file=sys.stderr)
        return 2
    lines[at + 3] = _readme_estimate()
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote the estimate in {out}: {lines[at + 3][:60]}...")
    return 0


def _readme_estimate() -> str:
    """The line the README's main command prints first: what its budget buys, and how split.

    Computed by the command's own code (`tuner.study.pipeline.start.study_budget`) for a study not
    stored yet (`stored=None`), with the command's defaults, so nothing is read or written.
    """
    from tuner.cli._checks import budget_seconds
    from tuner.study import OptimizeOptions
    from tuner.study.pipeline.start import study_budget
    from tuner.study.stages.confirm_plan import ConfirmPlan

    preset = load_preset(model="smollm2-135m", gpu="cpu")
    plan = ConfirmPlan.for_preset(preset)
    options = OptimizeOptions(storage_url="sqlite:///none.db", cache_dir=Path("none"))
    budget = study_budget(
        preset, options, plan, None,
        seconds=budget_seconds(README_BUDGET), text=README_BUDGET, started=time.monotonic(),
        trials_cap=None,
    )  # fmt: skip
    return budget.plan_line()


def _cpu() -> str:
    """The CPU as /proc/cpuinfo names it, with family/model and whether it has bf16 instructions."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU unknown"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    bf16 = "avx512_bf16" if "avx512_bf16" in flags else "amx_bf16" if "amx_bf16" in flags else ""
    return (
        f"{fields.get('model name', 'CPU')} (family/model {fields.get('cpu family', '?')}/"
        f"{fields.get('model', '?')}, {'with ' + bf16 if bf16 else 'no bf16 instructions'})"
    )


def _existing(url: str, out: Path) -> int:
    """Record a study already run: its server runs from Optuna's timestamps, and its export."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    (summary,) = optuna.get_all_study_summaries(url)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    runs = [t for t in study.get_trials() if t.datetime_start and t.datetime_complete]
    walls = sorted(
        float((t.user_attrs.get("timing") or {}).get("worker_wall_s") or 0.0) for t in runs
    )
    span = max(t.datetime_complete for t in runs) - min(t.datetime_start for t in runs)
    env = {**os.environ, "TUNER_STORAGE": url}
    export = subprocess.run(_tuner("export"), env=env, capture_output=True, text=True)
    lines = [
        "# A real study, recorded (written by scripts/first_run.py --existing)",
        "",
        f"Study `{summary.study_name}` (model {study.user_attrs.get('model')}, "
        f"{study.user_attrs.get('gpu')}), run before this script read it; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"{len(runs)} server runs from the first start to the last finish: "
        f"{span.total_seconds():.0f} s ({minutes(span.total_seconds())}); one run "
        f"{walls[0]:.0f}-{walls[-1]:.0f} s (worker wall time).",
        "",
        f"What the README's main command (`{README_COMMAND}`) prints as its first line:",
        "",
        "```",
        _readme_estimate(),
        "```",
        "",
        f"## `tuner export` on that study (exit status {export.returncode})",
        "",
        "```",
        (export.stdout + export.stderr).rstrip(),
        "```",
    ]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return export.returncode


if __name__ == "__main__":
    raise SystemExit(main())
