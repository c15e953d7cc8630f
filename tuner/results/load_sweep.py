"""Load-aware answers: the finalists' tasks/h against the number of agents, and what to export.

A load sweep (`tuner sweep`, `tuner.study.stages.load_sweep`) stores one `LoadSweep` in the study's
user attributes (`SWEEP_ATTR`, JSON): per config, one `LoadPoint` per agent count, each with its
per-task outcomes so that configs are compared task by task at the same load
(`tuner.metrics.paired_ratio`). From the stored data alone this module gives:

- the winner at each load by the export rule (`winner_at`): a config wins only if its paired
  interval against the baseline lies above 1, else the baseline. Each load is one run per
  config (one round), so that interval is the between-run term, not the task spread of the
  run: the study's noise (its recorded prior updated by its own baseline starts) stored with
  the sweep (`LoadSweep.noise`);
- the crossover in words ("n-gram depth 3 wins up to 2 agents, the baseline from 4");
- one sentence per load against the reference load's answer ("for 4 agents, export X; for 1
  agent, Y would be 2.00x faster");
- a depth schedule for vLLM's `num_speculative_tokens_per_batch_size` (`derive_schedule`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from tuner.metrics import DEFAULT_NOISE, BetweenRunNoise, PairedEstimate, RunOutcomes, paired_ratio
from tuner.results.export_rule import export_winner

__all__ = [
    "SWEEP_ATTR",
    "LoadPoint",
    "LoadSweep",
    "SweptConfig",
    "crossover_sentence",
    "derive_schedule",
    "load_lines",
    "load_sentences",
    "load_table_rows",
    "paired_at",
    "sweep_from_attrs",
    "winner_at",
]

SWEEP_ATTR: Final = "load_sweep"  # study user attribute holding LoadSweep.to_json()


@dataclass(frozen=True)
class LoadPoint:
    """One workload run of one config at one agent count, on that config's server."""

    agents: int
    tasks: int
    successes: int
    wall_s: float
    tasks_per_hour: float
    tasks_per_hour_low: float
    tasks_per_hour_high: float
    latency_p50_s: float | None  # per-task wall time of the scored tasks
    latency_p90_s: float | None
    acceptance_rate: float | None = None
    outcomes: tuple[tuple[str, bool, float], ...] = ()  # (task id, success, wall s)
    workload_run_id: int | None = None  # row in tuner's tables

    def run(self) -> RunOutcomes:
        """The point as the paired comparison reads it."""
        return RunOutcomes(self.outcomes, self.wall_s, self.agents)


@dataclass(frozen=True)
class SweptConfig:
    """One finalist (or a derived schedule) measured on one fresh server at every load."""

    key: str  # "#3" for trial 3, "schedule" for a derived depth schedule
    label: str
    trial_number: int | None
    params: Mapping[str, Any]
    serve_command: str
    is_baseline: bool = False
    schedule: tuple[tuple[int, int, int], ...] | None = None
    kv_cache_tokens: int | None = None
    failure: str | None = None  # why its server did not run (then no points)
    points: tuple[LoadPoint, ...] = ()

    def at(self, agents: int) -> LoadPoint | None:
        """Its point at `agents`, if measured."""
        return next((p for p in self.points if p.agents == agents), None)

    @property
    def depth(self) -> int:
        """Its static speculative depth (0 for no speculation)."""
        if self.params.get("method", "none") == "none":
            return 0
        return int(self.params.get("num_speculative_tokens") or 0)


@dataclass(frozen=True)
class LoadSweep:
    """A study's load sweep: the agent counts, the preset's own count, and the configs."""

    agents: tuple[int, ...]
    preset_agents: int
    mode: str  # workload mode of every run ("replay": load shape, answers not graded)
    tasks: int  # scored tasks per run
    configs: tuple[SweptConfig, ...] = field(default_factory=tuple)
    # The between-run noise of one run's paired log ratio that every verdict of the sweep uses:
    # the study's (`tuner.results.decision.study_noise`) when the sweep ran; a sweep stored
    # before it carried one reads as the default prior.
    noise: BetweenRunNoise = DEFAULT_NOISE

    @property
    def baseline(self) -> SweptConfig | None:
        """The swept baseline (no speculation), the reference of the export rule."""
        return next((c for c in self.configs if c.is_baseline and c.points), None)

    @property
    def reference_agents(self) -> int:
        """The load the study itself was run at (the largest swept one if it was not swept)."""
        return self.preset_agents if self.preset_agents in self.agents else max(self.agents)

    def with_config(self, config: SweptConfig) -> LoadSweep:
        """A copy where `config` replaces the config of the same key (or is appended)."""
        keys = [c.key for c in self.configs]
        configs = list(self.configs)
        if config.key in keys:
            configs[keys.index(config.key)] = config  # in place: its index keys its table rows
        else:
            configs.append(config)
        return LoadSweep(
            self.agents, self.preset_agents, self.mode, self.tasks, tuple(configs), self.noise
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (tuples become lists)."""
        data: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        data["noise"] = self.noise.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadSweep:
        """Read back what `to_json` wrote."""
        configs = []
        for c in data.get("configs", ()):
            points = tuple(
                LoadPoint(
                    **{
                        **p,
                        "outcomes": tuple((str(a), bool(b), float(s)) for a, b, s in p["outcomes"]),
                    }
                )
                for p in c.get("points", ())
            )
            schedule = c.get("schedule")
            configs.append(
                SweptConfig(
                    **{
                        **c,
                        "points": points,
                        "schedule": tuple(tuple(e) for e in schedule) if schedule else None,
                    }
                )
            )
        return cls(
            agents=tuple(int(a) for a in data["agents"]),
            preset_agents=int(data["preset_agents"]),
            mode=str(data["mode"]),
            tasks=int(data["tasks"]),
            configs=tuple(configs),
            noise=BetweenRunNoise.from_json(data.get("noise")) or DEFAULT_NOISE,
        )


def paired_at(
    sweep: LoadSweep, agents: int, config: SweptConfig, reference: SweptConfig
) -> PairedEstimate | None:
    """`config`'s tasks/h over `reference`'s at one load, paired task by task."""
    mine, theirs = config.at(agents), reference.at(agents)
    if mine is None or theirs is None:
        return None
    return paired_ratio([mine.run()], [theirs.run()], noise=sweep.noise)


def winner_at(sweep: LoadSweep, agents: int) -> SweptConfig | None:
    """The config to export at `agents`: `tuner.results.export_rule.export_winner` (the export
    rule: Holm over the configs measured at that load, then the highest paired ratio) on each
    config's run paired with the baseline's, else the baseline; None without a baseline."""
    base = sweep.baseline
    if base is None or base.at(agents) is None:
        return None
    tests = {
        i: paired_at(sweep, agents, config, base)
        for i, config in enumerate(sweep.configs)
        if config is not base and config.at(agents) is not None
    }
    winner = export_winner(tests)
    return base if winner is None else sweep.configs[winner]


def _agents_word(n: int) -> str:
    return f"{n} agent" if n == 1 else f"{n} agents"


def _short(config: SweptConfig, sweep: LoadSweep) -> str:
    return "the baseline" if config is sweep.baseline else config.label


def crossover_sentence(sweep: LoadSweep) -> str | None:
    """Which config wins where, e.g. "n-gram depth 3 wins up to 2 agents, the baseline from 4"."""
    loads = [n for n in sweep.agents if winner_at(sweep, n) is not None]
    if not loads:
        return None
    groups: list[tuple[SweptConfig, list[int]]] = []
    for n in loads:
        w = winner_at(sweep, n)
        assert w is not None
        if groups and groups[-1][0].key == w.key:
            groups[-1][1].append(n)
        else:
            groups.append((w, [n]))
    if len(groups) == 1:
        w, ns = groups[0]
        span = f"{ns[0]}-{ns[-1]} agents" if len(ns) > 1 else _agents_word(ns[0])
        return f"{_short(w, sweep)} wins at every load measured ({span})"
    parts = []
    for i, (w, ns) in enumerate(groups):
        name = _short(w, sweep)
        if i == 0:
            parts.append(f"{name} wins up to {_agents_word(ns[-1])}")
        elif i == len(groups) - 1:
            parts.append(f"{name} from {ns[0]}")
        else:
            parts.append(f"{name} from {ns[0]} to {ns[-1]}")
    return ", ".join(parts)


def load_sentences(sweep: LoadSweep) -> list[str]:
    """The answer per load, against the reference load's export.

    "for 4 agents, export X; for 1 agent, Y would be 2.00x faster [1.80, 2.20]". Y is named only
    when its paired interval against X at that load lies above 1.
    """
    ref = sweep.reference_agents
    export = winner_at(sweep, ref)
    if export is None:
        return []
    clauses = [f"for {_agents_word(ref)}, export {export.label}"]
    for n in sweep.agents:
        if n == ref or export.at(n) is None:
            continue
        best: tuple[SweptConfig, PairedEstimate] | None = None
        for config in sweep.configs:
            if config.key == export.key:
                continue
            est = paired_at(sweep, n, config, export)
            if est is not None and est.beats and (best is None or est.ratio > best[1].ratio):
                best = (config, est)
        if best is None:
            clauses.append(f"for {_agents_word(n)}, the same (nothing beats it beyond the noise)")
        else:
            c, est = best
            clauses.append(
                f"for {_agents_word(n)}, {c.label} would be {est.ratio:.2f}x faster "
                f"[{est.low:.2f}, {est.high:.2f}]"
            )
    return ["; ".join(clauses)]


def derive_schedule(
    sweep: LoadSweep, max_num_seqs: int | None = None
) -> tuple[SweptConfig, tuple[tuple[int, int, int], ...]] | None:
    """A per-batch-size depth schedule from the sweep, for one speculative finalist's server.

        At each load the depth is the static depth of the export-rule winner among the baseline
    and the speculative finalists of the same method (0 where the baseline wins). The batch
    sizes between two measured loads take the higher load's depth (the cautious side when
    depth falls with load); the last range runs to `max_num_seqs` (default: the host server's,
    else the largest load; vLLM carries the last depth on beyond it). Returns the finalist
    whose server the schedule runs on (the deepest speculative winner) and the schedule, or
    None when one static depth wins everywhere (no schedule needed).
    """
    if sweep.baseline is None:
        return None
    winners = [winner_at(sweep, n) for n in sweep.agents]
    if any(w is None for w in winners):
        return None
    speculative = [w for w in winners if w is not None and w.depth > 0]
    depths = [w.depth if w is not None else 0 for w in winners]
    if not speculative or len(set(depths)) == 1:
        return None
    host = max(speculative, key=lambda w: w.depth)
    if any(w.params.get("method") != host.params.get("method") for w in speculative):
        return None  # winners of different methods cannot share one server's schedule
    top = max_num_seqs or int(host.params.get("max_num_seqs") or max(sweep.agents))
    ranges: list[tuple[int, int, int]] = []
    start = 1
    for i, (n, depth) in enumerate(zip(sweep.agents, depths, strict=True)):
        end = max(top, n) if i == len(depths) - 1 else n
        if ranges and ranges[-1][2] == depth:
            ranges[-1] = (ranges[-1][0], end, depth)
        else:
            ranges.append((start, end, depth))
        start = end + 1
    return host, tuple(ranges)


def load_lines(sweep: LoadSweep) -> list[str]:
    """What the report says about load: crossover, the answer per load, the schedule."""
    lines = [line for line in (crossover_sentence(sweep), *load_sentences(sweep)) if line]
    derived = derive_schedule(sweep)
    if derived is not None:
        host, ranges = derived
        lines.append(
            f"depth schedule from the sweep (on {host.key}'s server): "
            + ", ".join(f"batch {a}-{b}: depth {d}" for a, b, d in ranges)
        )
    swept = next((c for c in sweep.configs if c.schedule is not None and c.points), None)
    if swept is not None:
        lines.append(f"schedule measured as {swept.key}; run it with: {swept.serve_command}")
    return lines


def _fmt_point(p: LoadPoint | None) -> str:
    if p is None:
        return "not measured"
    latency = f"{p.latency_p50_s:.1f} s" if p.latency_p50_s is not None else "not measured"
    return (
        f"{p.tasks_per_hour:,.0f} [{p.tasks_per_hour_low:,.0f}-{p.tasks_per_hour_high:,.0f}]"
        f" / {latency}"
    )


def load_table_rows(sweep: LoadSweep) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Columns and rows of the sweep table: per config, tasks/h [interval] / task p50 per load."""
    columns = (
        "config",
        *(f"{_agents_word(n)}: tasks/h [interval] / task p50" for n in sweep.agents),
        "winner at",
    )
    winners = {n: winner_at(sweep, n) for n in sweep.agents}
    rows = []
    for c in sweep.configs:
        won = [str(n) for n, w in winners.items() if w is not None and w.key == c.key]
        name = f"{c.key} {c.label}"
        if c.failure:
            rows.append((name, *(f"did not run: {c.failure}" for _ in sweep.agents), ""))
            continue
        cells = tuple(_fmt_point(c.at(n)) for n in sweep.agents)
        rows.append((name, *cells, ", ".join(won) or "-"))
    return columns, tuple(rows)


def sweep_from_attrs(attrs: Mapping[str, Any]) -> LoadSweep | None:
    """The study's stored sweep, or None when no sweep ran."""
    data = attrs.get(SWEEP_ATTR)
    return LoadSweep.from_json(data) if isinstance(data, Mapping) else None
