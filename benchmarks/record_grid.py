"""Record every configuration of a (trimmed) preset space on the real vLLM CPU build.

The table this writes, `benchmarks/data/grid-smollm2-135m-cpu.json`, is what
`benchmarks/sample_efficiency.py` replays studies over. Each configuration is evaluated once by
`tuner.study.trial.evaluate.evaluate`, the very function a study's Ray worker runs, with the request
built as the driver builds it (preset server spec, workload, plain benchmark, tokenizer), so the
seconds and outcomes are the ones a study sees. Three configurations are run three more times
each to show the run-to-run noise.

Why the space is trimmed: the CPU preset's full space has 270 configurations (6 without
speculation, 264 n-gram ones); the first recorded trial took 267 s on this 2-core box shared by
other jobs (185 s of it the server start), so the full grid would be about 20 hours of server
time. The recorded space keeps the method, every speculative depth (1-4) and both ends of the
KV cache range (300 MB, about 13k tokens: the smallest preset value; 2 GB: the baseline's), and
fixes the n-gram lookup window at 2-3 and `max_num_seqs` at 8 (the baseline's; with two agents
at most two sequences run, so 4 and 8 schedule identically). That is 2 + 4 x 2 = 10
configurations, plus two more runs of three of them for the noise: 16 runs, about 40 minutes of
server time at the measured 150-270 s a trial.

The large grid (`--space large`, `benchmarks/data/grid-smollm2-135m-cpu-large.json`): on the
10-config grid a search cannot be told from a coin (25% of its cost is 2-3 trials and 4 of 9
candidates are within 5% of the best), so this one has 52 configurations:

- no speculation, and n-gram at every depth 1-4;
- three lookup windows, `prompt_lookup_min` 1, 2 or 3 with `prompt_lookup_max` 3: the shortest
  match vLLM's proposer accepts is the window knob that changes how often it drafts (min 1
  drafts after any repeated token, min 3 only after a repeated trigram), and a preset space is
  a product of ranges, so a list of arbitrary windows such as [1,2],[2,4] would not be a space
  the sampler draws from; the existing grid's 2-3 is one of the three;
- KV cache 300 MB and 2 GB (the preset's smallest and the baseline's; both already hold every
  agent's context, see `tuner.study.space.workload_reductions`, so the middle 1 GB adds cost,
  not information);
- `max_num_seqs` 2 (the two agents' concurrency) and 8 (the baseline's): whether a value above
  the workload's concurrency changes anything is exactly what the space reduction claims it
  does not, and this grid measures it;
- four configurations run three times (noise): the baseline, the existing grid's best region
  (depth 4, 300 MB), a shallow aggressive one (depth 1, min 1) and one at `max_num_seqs` 2.

That is 4 + 4 x 3 x 2 x 2 = 52 configurations and 8 noise repeats: 60 runs. The 10-config
recording's runs cost 147-268 s on a box shared with other jobs; the large grid, recorded in one
sitting on an idle box of the same kind, cost about 100-135 s a run (each run's `wall_s`:
startup, warm-up, the scored window and the plain benchmark; and its `load_1min` at start and
end), close to two hours in all. Cut further in each direction: the preset's third KV size (x1.5
runs), all nine lookup windows (x3) or `max_num_seqs` 4 (x1.5) would each make it 3-6 hours of
an otherwise idle machine; depths above 4 are outside the shipped preset. A recording is one
machine's: runs of a slower or busier machine are not mixed into it (the first partial recording
ran about 1.4x slower and was recorded again from the start).

Each evaluation takes the shared heavy lock (`/tmp/tuner-heavy.lock`) for itself only, so other
users of the box interleave. The file is rewritten after every run and runs already in it are
skipped, so a killed recorder resumes. Re-record with:

    nohup .venv/bin/python -m benchmarks.record_grid > /tmp/record_grid.log 2>&1 &
    nohup .venv/bin/python -m benchmarks.record_grid --space large > /tmp/grid_large.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._evaluate import fresh_start
from benchmarks._machine import machine_record
from tuner.models import prepare
from tuner.settings import get_settings
from tuner.study.space import Preset, config_key, load_preset
from tuner.study.trial.request import ThroughputPlan, TrialResult

DATA = Path(__file__).resolve().parent / "data" / "grid-smollm2-135m-cpu.json"
LARGE_DATA = DATA.with_name("grid-smollm2-135m-cpu-large.json")
LOCK = Path("/tmp/tuner-heavy.lock")
COMMAND = "nohup .venv/bin/python -m benchmarks.record_grid > /tmp/record_grid.log 2>&1 &"
LARGE_COMMAND = (
    "nohup .venv/bin/python -m benchmarks.record_grid --space large > /tmp/grid_large.log 2>&1 &"
)
NOISE_REPEATS = 2  # extra runs of each noise config: three runs in all
# The trimmed space (see the module docstring); everything else is the shipped CPU preset.
TRIMMED_SPACE: dict[str, Any] = {
    "methods": ["none", "ngram"],
    "num_speculative_tokens": {"low": 1, "high": 4},
    "prompt_lookup_min": {"low": 2, "high": 2},
    "prompt_lookup_max": {"low": 3, "high": 3},
    "kv_cache_memory_bytes": [300_000_000, 2_000_000_000],
    "max_num_seqs": [8],
}


def _ngram(depth: int, lookup_min: int, kv: int, seqs: int) -> dict[str, Any]:
    return {
        "method": "ngram",
        "num_speculative_tokens": depth,
        "prompt_lookup_min": lookup_min,
        "prompt_lookup_max": 3,
        "kv_cache_memory_bytes": kv,
        "max_num_seqs": seqs,
    }


BASELINE = {"method": "none", "kv_cache_memory_bytes": 2_000_000_000, "max_num_seqs": 8}
# Noise: the baseline, a shallow n-gram config, a deep one with the small cache.
NOISE_CONFIGS: tuple[dict[str, Any], ...] = (
    BASELINE,
    _ngram(2, 2, 2_000_000_000, 8),
    _ngram(4, 2, 300_000_000, 8),
)


# The large space (see the module docstring): 52 configurations.
LARGE_SPACE: dict[str, Any] = {
    "methods": ["none", "ngram"],
    "num_speculative_tokens": {"low": 1, "high": 4},
    "prompt_lookup_min": {"low": 1, "high": 3},
    "prompt_lookup_max": {"low": 3, "high": 3},
    "kv_cache_memory_bytes": [300_000_000, 2_000_000_000],
    "max_num_seqs": [2, 8],
}


# Noise of the large grid: the baseline, the 10-config grid's best region, a shallow aggressive
# one, and one at max_num_seqs 2 (three runs each).
LARGE_NOISE_CONFIGS: tuple[dict[str, Any], ...] = (
    BASELINE,
    _ngram(4, 2, 300_000_000, 8),
    _ngram(1, 1, 2_000_000_000, 8),
    _ngram(3, 2, 2_000_000_000, 2),
)


@dataclass(frozen=True)
class GridPlan:
    """One recordable grid: its space, noise configs, data file and re-record command."""

    name: str
    space: dict[str, Any]
    noise: tuple[dict[str, Any], ...]
    data: Path
    command: str

    def preset(self) -> Preset:
        """The shipped CPU preset with this grid's space."""
        base = load_preset(model="smollm2-135m", gpu="cpu")
        data = json.loads(base.model_dump_json())
        data["space"] = self.space
        return Preset.model_validate(data)


PLANS = {
    "trimmed": GridPlan("trimmed", TRIMMED_SPACE, NOISE_CONFIGS, DATA, COMMAND),
    "large": GridPlan("large", LARGE_SPACE, LARGE_NOISE_CONFIGS, LARGE_DATA, LARGE_COMMAND),
}


# Loop settings: how a study searches, not what one run measures (a recording stays valid when
# a preset changes them).
_LOOP_ONLY = {"screening": False, "confirm": None, "load_sweep": ()}


def same_measurement(recorded: Preset, preset: Preset) -> bool:
    """True when the runs recorded with `recorded` measure what `preset` would (the same
    model, server, space and workload; the loop's own settings may differ)."""
    return recorded.model_copy(update=_LOOP_ONLY) == preset.model_copy(update=_LOOP_ONLY)


def grid(preset: Preset) -> Iterator[dict[str, Any]]:
    """Every params dict `Preset.suggest` can return for this space (same keys, same rules)."""
    s = preset.space
    assert s.kv_cache_memory_bytes is not None, "a CPU preset searches the KV cache size"
    memory = [
        {"kv_cache_memory_bytes": kv, "max_num_seqs": n}
        for kv in s.kv_cache_memory_bytes
        for n in s.max_num_seqs
    ]
    for method in s.methods:
        if method == "none":
            for m in memory:
                yield {"method": "none", **m}
            continue
        if method != "ngram":
            raise ValueError(f"the recorder knows the CPU methods only, not {method!r}")
        d = s.num_speculative_tokens
        for depth in range(d.low, d.high + 1, d.step):
            for lo in range(s.prompt_lookup_min.low, s.prompt_lookup_min.high + 1):
                hi_low = max(lo, s.prompt_lookup_max.low)
                for hi in range(hi_low, max(hi_low, s.prompt_lookup_max.high) + 1):
                    for m in memory:
                        yield {
                            "method": "ngram",
                            "num_speculative_tokens": depth,
                            "prompt_lookup_min": lo,
                            "prompt_lookup_max": hi,
                            **m,
                        }


def plan(
    preset: Preset, noise: tuple[dict[str, Any], ...] = NOISE_CONFIGS
) -> list[tuple[str, int]]:
    """(config key, repeat) in run order.

    Every config once, in one seeded shuffle, with the noise repeats spread evenly through it
    (the baseline's first, so a partial recording can already be replayed). An earlier plan
    recorded the configs with the baseline's KV cache first and the other size an hour later:
    the large grid's KV figure cannot be told from that hour's drift (its repeats read lower
    late than early), so a knob is judged from interleaved fresh starts instead. Spread
    out, the repeats see drift, and no knob's values are recorded at different times.
    """
    configs = [config_key(p) for p in grid(preset)]
    random.Random(12).shuffle(configs)
    repeats = [(config_key(p), r) for p in noise for r in range(1, NOISE_REPEATS + 1)]
    base = config_key(preset.baseline_params())
    base_repeats = [(k, r) for k, r in repeats if k == base]
    other_repeats = [run for run in repeats if run not in base_repeats]
    random.Random(14).shuffle(other_repeats)
    spread = base_repeats + other_repeats
    # Repeat j runs after config number round((j + 1) x N / (R + 1)), evenly through the
    # recording, and never before its own config's first run.
    after: dict[int, list[tuple[str, int]]] = {}
    for j, (key, rep) in enumerate(spread):
        at = round((j + 1) * len(configs) / (len(spread) + 1))
        after.setdefault(max(at, configs.index(key) + 1), []).append((key, rep))
    out: list[tuple[str, int]] = []
    for n, key in enumerate(configs, start=1):
        out += [(key, 0), *after.get(n, [])]
    return out


def _run_entry(key: str, rep: int, result: TrialResult, progress: list[list[float]]) -> dict:
    w = result.workload
    starts = result.server_starts
    facts = starts[-1].facts if starts else None
    entry: dict[str, Any] = {
        "params": json.loads(key),
        "rep": rep,
        "failure_kind": result.failure_kind,
        "failure_reason": result.failure_reason,
        "infeasible": result.infeasible,
        "wall_s": round(result.wall_s, 2),
        "startup_s": round(result.startup_s, 2),
        "workload_s": round(result.workload_s, 2),
        "throughput_s": round(result.throughput_s, 2),
        "kv_cache_tokens": facts.kv_cache_tokens if facts else None,
    }
    if w is not None:
        warm = [t for t in w.task_records if t.warmup]
        scored = [t for t in w.task_records if not t.warmup]
        zero = min((t.started_s for t in scored), default=0.0)
        entry.update(
            scored_wall_s=round(w.scored_wall_s, 3),
            warmup_s=round(max((t.started_s + t.wall_s for t in warm), default=0.0), 3),
            tasks_per_hour=round(w.tasks_per_hour, 2),
            tasks_per_hour_low=round(w.tasks_per_hour_low, 2),
            tasks_per_hour_high=round(w.tasks_per_hour_high, 2),
            prefix_cache_hit_ratio=w.prefix_cache_hit_ratio,
            acceptance_rate=w.acceptance_rate,
            preemptions=w.preemptions,
            # Scored tasks in suite order: success, start and duration (s, from the window's
            # first task), steps, output tokens.
            tasks=[
                [
                    int(t.success),
                    round(t.started_s - zero, 3),
                    round(t.wall_s, 3),
                    len(t.steps),
                    t.output_tokens,
                ]
                for t in scored
            ],
            # What the driver's pruner saw: [tasks done, successes, elapsed s] per report.
            progress=progress,
        )
    return entry


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _save(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def _new_data(preset: Preset, grid_plan: GridPlan) -> dict[str, Any]:
    return {
        "about": (
            f"Every configuration of the {grid_plan.name} smollm2-135m CPU space evaluated by "
            "tuner.study.trial.evaluate.evaluate on the real vLLM CPU build (replay workload: load "
            "shape, not graded answers), plus noise repeats; runs with a 'source' were taken "
            "from tuner studies run on the same machine (--harvest, removed after 95daa70). "
            "Why this space: see benchmarks/record_grid.py's docstring."
        ),
        "command": grid_plan.command,
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "cpu": cpu_of(machine_record()),
        "preset": json.loads(preset.model_dump_json()),
        "runs": [],
    }


def _done(data: dict[str, Any]) -> set[tuple[str, int]]:
    """(config, repeat) pairs covered: a config's n-th run counts as its repeat n - 1."""
    counts: dict[str, int] = {}
    for r in data["runs"]:
        k = config_key(r["params"])
        counts[k] = counts.get(k, 0) + 1
    return {(k, rep) for k, n in counts.items() for rep in range(n)}


def _append(path: Path, entry: dict[str, Any]) -> None:
    """Add a run to the file; its `rep` is its index among its config's runs there."""
    data = _load(path)
    assert data is not None
    key = config_key(entry["params"])
    entry["rep"] = sum(1 for r in data["runs"] if config_key(r["params"]) == key)
    data["runs"].append(entry)
    _save(path, data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    space = "which grid (docstring)"
    parser.add_argument("--space", choices=sorted(PLANS), default="trimmed", help=space)
    parser.add_argument("--out", type=Path, default=None, help="default: the grid's data file")
    parser.add_argument("--limit", type=int, default=None, help="stop after this many runs")
    args = parser.parse_args()

    grid_plan = PLANS[args.space]
    preset = grid_plan.preset()
    args.out = args.out or grid_plan.data
    data = _load(args.out)
    if data is None:
        _save(args.out, _new_data(preset, grid_plan))
    elif not same_measurement(Preset.model_validate(data["preset"]), preset):
        # Compared as presets, not as JSON: a field added to Preset later (with its default)
        # does not make the recording a different one.
        print(f"{args.out} was recorded with another preset; move it away first", file=sys.stderr)
        return 2
    return _record(args.out, preset, grid_plan, args.limit)


COLD_START_FACTOR = 2.0  # a server start this many times the grid's median is a cold cache


def cold_start(result: TrialResult, data: dict[str, Any]) -> str | None:
    """Why `result` is a cold compile cache's run and not the config's (None: it is the config's).

    vLLM's CPU build compiles its model graph at the first start on a machine (and again for
    shapes it has not seen); the first run after a fresh install started in 192 s against a
    median of about 52 s, and its scored window crawled while shapes compiled. Such a run says
    how new the machine is, not how fast the config serves, so it is not recorded: a run whose
    server start took more than `COLD_START_FACTOR` times the median start of the grid's
    completed runs (once it has five) is run again.
    """
    starts = sorted(r["startup_s"] for r in data["runs"] if r.get("tasks_per_hour"))
    if len(starts) < 5 or result.failure_kind is not None:
        return None
    median = starts[len(starts) // 2]
    if result.startup_s <= COLD_START_FACTOR * median:
        return None
    return (
        f"cold compile cache (or a slower machine): the server started in "
        f"{result.startup_s:.0f} s, more than {COLD_START_FACTOR:g}x the grid's median start "
        f"({median:.0f} s)"
    )


def cpu_of(machine: dict[str, Any]) -> dict[str, Any]:
    """What makes two machines' runs comparable: CPU model, family/model, vector flags, cores."""
    keys = ("cpu_model", "cpu_family_model", "simd_flags", "cores")
    return {k: machine.get(k) for k in keys}


def other_machine(data: dict[str, Any], here: dict[str, Any]) -> str | None:
    """Why this machine may not add runs to `data` (None: it may).

    A grid is one machine's: on 2026-12-02 a Zen 3 box (CPU family/model 25/1, AVX2 without
    AVX-512) started the CPU build's server in 190-245 s where the Zen 4 box (25/17, AVX-512
    with bf16) that recorded the grid took about 52 s, and its scored window crawled at 4-16
    tokens/s. Runs recorded since then carry their CPU (`cpu_of`); the file's own `cpu` names
    the machine of runs that predate that record. One that differs from this machine is refused.
    """
    recorded = [("the file's runs were recorded", data.get("cpu"))]
    recorded += [("a run of the file was recorded", r.get("cpu")) for r in data["runs"]]
    for what, theirs in recorded:
        if theirs is not None and theirs != here:
            return (
                f"{what} on another machine ({theirs}); this one is {here}: record a new "
                "grid here (--out FILE), a grid is one machine's"
            )
    return None


def _record(path: Path, preset: Preset, grid_plan: GridPlan, limit: int | None) -> int:
    here = cpu_of(machine_record())
    if why := other_machine(_load(path) or {"runs": []}, here):
        print(f"{path}: {why}", file=sys.stderr)
        return 2
    cache = get_settings().cache_path()
    model_path = str(prepare(preset.model.prepare or "smollm2-135m", cache))
    done = _done(_load(path) or {"runs": []})
    todo = [run for run in plan(preset, grid_plan.noise) if run not in done]
    if limit is not None:
        todo = todo[:limit]
    print(f"{len(todo)} runs to go", flush=True)
    plan_ = ThroughputPlan(
        streams=preset.throughput_streams,
        requests=preset.throughput_requests,
        output_tokens=preset.throughput_output_tokens,
    )
    redone: set[tuple[str, int]] = set()
    for i, (key, rep) in enumerate(todo):
        run = fresh_start(
            preset, json.loads(key), model_path=model_path, cache_dir=cache, study="grid",
            number=i, lock=LOCK, throughput=plan_,
        )  # fmt: skip
        result = run.result
        if cold := cold_start(result, _load(path) or {"runs": []}):
            # Not this config's cost: run it again at the end (once; a resume tries again).
            again = (key, rep) not in redone
            print(
                f"[{i + 1}/{len(todo)}] {key} rep {rep}: {cold}; not kept"
                + ("; it runs again at the end" if again else ""),
                flush=True,
            )
            if again:
                redone.add((key, rep))
                todo.append((key, rep))
            continue
        entry = _run_entry(key, rep, result, run.progress)
        # The 1-minute load average as the run started and ended: a run is evidence only on an
        # otherwise idle box (vLLM itself keeps the load near 2 on 2 cores).
        entry["load_1min"], entry["recorded_at"] = list(run.load_1min), run.recorded_at
        entry["cpu"] = here
        _append(path, entry)
        print(
            f"[{i + 1}/{len(todo)}] {entry['recorded_at']} {key} rep {rep}: "
            f"{entry.get('tasks_per_hour')} tasks/h, wall {entry['wall_s']} s, "
            f"failure {entry['failure_kind']}, load {entry['load_1min']}, "
            f"waited {run.waited_s:.0f} s for the lock",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
