"""How long a bad `--storage` takes to answer: the two cases of issue 24, timed on the real CLI.

Runs `tuner optimize --model smollm2-135m --gpu cpu --storage URL` in a fresh interpreter for
`sqlite:////nonexistent-dir/x/y.db` and `notaurl`, `--runs` times each, and writes the wall
and CPU seconds (median and max), the exit code, the number of stderr lines, whether any Ray
line appeared, and the machine's load average to benchmarks/data/preflight-timing.json. Before
the checks of tuner/cli/_checks.py the first case hung past 120 s after starting Ray.

    python benchmarks/preflight_timing.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("sqlite:////nonexistent-dir/x/y.db", "notaurl")


def _once(url: str, cwd: Path) -> dict[str, object]:
    argv = [sys.executable, "-m", "tuner.cli", "optimize", "--model", "smollm2-135m", "--gpu",
            "cpu", "--storage", url]  # fmt: skip
    env = {**os.environ, "TUNER_CACHE_DIR": str(cwd / "cache"), "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "exit_code": proc.returncode,
        "stderr_lines": len(lines),
        "ray_output": "ray" in (proc.stdout + proc.stderr).lower(),
        "line": lines[0] if lines else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/data/preflight-timing.json")
    args = parser.parse_args()
    result: dict[str, object] = {
        "command": "python benchmarks/preflight_timing.py",
        "finished_utc": "",
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg(),
        "cases": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for url in CASES:
            runs = [_once(url, Path(tmp)) for _ in range(args.runs)]
            walls = [float(r["wall_s"]) for r in runs]  # type: ignore[arg-type]
            cpus = [float(r["cpu_s"]) for r in runs]  # type: ignore[arg-type]
            result["cases"][url] = {  # type: ignore[index]
                "runs": len(runs),
                "wall_s_median": round(statistics.median(walls), 2),
                "wall_s_max": round(max(walls), 2),
                "cpu_s_median": round(statistics.median(cpus), 2),
                "all_exit_2": all(r["exit_code"] == 2 for r in runs),
                "all_one_line": all(r["stderr_lines"] == 1 for r in runs),
                "any_ray_output": any(r["ray_output"] for r in runs),
                "line": runs[0]["line"],
            }
            print(f"{url}: wall median {statistics.median(walls):.2f} s, max {max(walls):.2f} s; "
                  f"CPU median {statistics.median(cpus):.2f} s")  # fmt: skip
    result["load_average_after"] = os.getloadavg()
    result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
