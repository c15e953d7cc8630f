"""`tuner workload run|describe` and `tuner bench throughput`: the measurement, usable alone.

`tuner workload run` drives an already running server like `vllm bench serve` does, but with
the agent suite, and prints the score with its diagnostics; `describe` prints the suite's shape
in the model's tokens; `bench throughput` is the plain output-tokens/s benchmark.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuner.cli._app import console
from tuner.errors import ConfigError

if TYPE_CHECKING:
    from tuner.records import WorkloadRecord
    from tuner.workload import RunProgress, SuiteShape, SuiteStats

# tuner.workload (HTTP client, tokenizers, NumPy) is imported by these commands when they run:
# at start-up it cost every other command's input check half a second.

__all__ = ["app", "bench_app"]

app = typer.Typer(help="The agent workload: run it against a server, or describe it.")
bench_app = typer.Typer(help="Plain benchmarks beside the agent score.", no_args_is_help=True)

_SHAPE_HELP = "Suite shape: 'default' (realistic, 16k window) or 'cpu' (SmolLM2 on 2 cores)."


def _shape(name: str) -> SuiteShape:
    from tuner.workload import SuiteShape

    try:
        return SuiteShape.named(name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def _pct(value: float | None) -> str:
    return "not measured" if value is None else f"{value * 100:.1f}%"


def result_table(record: WorkloadRecord) -> Table:
    """The result of one run as a two-column table."""
    table = Table(title=f"workload ({record.mode}, {record.agents} agents)", show_header=False)
    table.add_column("measure", style="bold")
    table.add_column("value")
    table.add_row(
        "successful tasks/hour",
        f"{record.tasks_per_hour:.1f}  (95% CI {record.tasks_per_hour_low:.1f}"
        f"–{record.tasks_per_hour_high:.1f})",
    )
    table.add_row(
        "success rate",
        f"{record.successes}/{record.tasks} = {record.success_rate * 100:.1f}%  (95% CI "
        f"{record.success_rate_low * 100:.1f}–{record.success_rate_high * 100:.1f}%)",
    )
    table.add_row("scored wall time", f"{record.scored_wall_s:.1f} s")
    table.add_row("prefix cache hit", _pct(record.prefix_cache_hit_ratio))
    if record.spec_drafts is None:
        table.add_row("speculation", "off (no draft counters)")
    else:
        table.add_row(
            "draft acceptance",
            f"{_pct(record.acceptance_rate)}, mean acceptance length "
            f"{record.mean_acceptance_length or 0:.2f} ({record.spec_drafts} drafts)",
        )
        if record.spec_accepted_per_pos:
            per_pos = ", ".join(str(n) for n in record.spec_accepted_per_pos)
            table.add_row("accepted per position", per_pos)
    table.add_row("preemptions", "not measured" if record.preemptions is None else
                  str(record.preemptions))  # fmt: skip
    table.add_row("TTFT p50 / p90", f"{_ms(record.ttft_p50)} / {_ms(record.ttft_p90)}")
    table.add_row("TPOT p50 / p90", f"{_ms(record.tpot_p50)} / {_ms(record.tpot_p90)}")
    table.add_row("ITL p50 / p90", f"{_ms(record.itl_p50)} / {_ms(record.itl_p90)}")
    if record.output_tokens_per_s is not None:
        table.add_row("output tokens/s", f"{record.output_tokens_per_s:.1f}")
    from tuner.workload import REUSE_CLASSES

    classes = Counter(s.reuse_class for t in record.task_records if not t.warmup for s in t.steps)
    table.add_row(
        "prefix reuse (steps)",
        ", ".join(f"{c} {classes[c]}" for c in REUSE_CLASSES if classes[c]) or "-",
    )
    energy = "not measured" if record.energy_joules is None else f"{record.energy_joules:.0f} J"
    table.add_row("GPU energy", energy)
    # Why each failed task failed (context length with both numbers, deadline, HTTP status).
    from tuner.workload.runner import failed_tasks

    for task_id, reason in failed_tasks(record):
        table.add_row(f"failed {task_id}", reason)
    return table


@app.command("run")
def run_cmd(
    url: str = typer.Option(..., "--url", help="The running server, e.g. http://127.0.0.1:8000"),
    model: str = typer.Option(..., "--model", help="The served model name."),
    mode: str = typer.Option("replay", "--mode", help="live or replay."),
    tasks: int = typer.Option(192, "--tasks", help="Scored tasks."),
    agents: int = typer.Option(4, "--agents", help="Concurrent agents."),
    warmup: int = typer.Option(4, "--warmup", help="Warm-up tasks (not scored)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the task set."),
    shape: str = typer.Option("default", "--shape", help=_SHAPE_HELP),
    protocol: str = typer.Option(
        "tools", "--protocol", help="tools (OpenAI tools) or text (JSON action in a block)."
    ),
    traces: str | None = typer.Option(None, "--traces", help="JSONL conversations to replay."),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="Tokenizer path for forced lengths (default: the model path)."
    ),
    tool_latency: float = typer.Option(0.25, "--tool-latency", help="Median tool latency, s."),
    deadline: float = typer.Option(600.0, "--deadline", help="Per-task deadline, s."),
    request_options: str | None = typer.Option(
        None, "--request-options", help="JSON merged into every request, e.g. '{\"top_k\": 1}'."
    ),
) -> None:
    """Run the agent workload against a running server and print the score."""
    from tuner.workload import WorkloadSettings, run_workload_sync

    options: dict[str, Any] = {}
    if request_options:
        try:
            options = json.loads(request_options)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--request-options is not JSON: {exc.msg}") from None
    settings = WorkloadSettings.model_validate(
        {
            "mode": mode, "tasks": tasks, "agents": agents, "warmup_tasks": warmup,
            "seed": seed, "tool_protocol": protocol, "traces": traces,
            "tool_latency_s": tool_latency, "task_deadline_s": deadline,
            "request_options": options, "shape": _shape(shape),
        }
    )  # fmt: skip
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("warming up", total=None, rate="")

        def on_progress(p: RunProgress) -> None:
            rate = f"{p.successes} ok, {p.tasks_per_hour:.0f} tasks/h" if p.tasks_done else ""
            progress.update(bar, description="tasks", total=p.tasks_total,
                            completed=p.tasks_done, rate=rate)  # fmt: skip

        record = run_workload_sync(
            url, model, settings, tokenizer=tokenizer, on_progress=on_progress
        )
    console.print(result_table(record))


def stats_table(stats: SuiteStats) -> Table:
    """The shape statistics as a table (tokens)."""
    source = (
        "estimated (no tokenizer given: pass --model for real counts)"
        if stats.estimated
        else stats.tokenizer
    )
    table = Table(title=f"suite shape, {stats.tasks} tasks; tokens: {source}")
    for column in ("measure", "min", "median", "p90", "p95", "p99", "max"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row("shared prefix", "", str(stats.shared_prefix_tokens), "", "", "", "")
    rows = (
        ("model calls per task", stats.steps),
        ("tool output", stats.tool_output_tokens),
        ("assistant turn (tool call)", stats.call_turn_tokens),
        ("assistant turn (plan/summary)", stats.long_turn_tokens),
        ("prompt growth per step", stats.prompt_growth_tokens),
        ("final context", stats.final_context_tokens),
    )
    for name, spread in rows:
        values = (spread.min, spread.median, spread.p90, spread.p95, spread.p99, spread.max)
        table.add_row(name, *(f"{v:,.0f}" for v in values))
    table.caption = (
        f"ideal prefix-cache hit ratio at block {stats.block_size}: "
        f"{stats.ideal_cache_hit_ratio * 100:.1f}% live, "
        f"{stats.ideal_replay_hit_ratio * 100:.1f}% replay"
    )
    return table


@app.command("describe")
def describe_cmd(
    model: str | None = typer.Option(
        None, "--model", help="Model path or tokenizer to count tokens with."
    ),
    shape: str = typer.Option("default", "--shape", help=_SHAPE_HELP),
    tasks: int = typer.Option(192, "--tasks", help="Tasks to measure."),
    seed: int = typer.Option(0, "--seed", help="Seed of the task set."),
    protocol: str = typer.Option("tools", "--protocol", help="tools or text."),
    block_size: int = typer.Option(16, "--block-size", help="KV block size (CPU build: 128)."),
) -> None:
    """Print the suite's shape statistics in tokens."""
    from tuner.workload import TokenCounter, WorkloadSettings, describe_suite

    settings = WorkloadSettings.model_validate(
        {"tasks": tasks, "seed": seed, "shape": _shape(shape), "tool_protocol": protocol}
    )
    stats = describe_suite(settings, TokenCounter.load(model), block_size=block_size)
    console.print(stats_table(stats))


@bench_app.command("throughput")
def throughput_cmd(
    url: str = typer.Option(..., "--url", help="The running server."),
    model: str = typer.Option(..., "--model", help="The served model name."),
    streams: list[int] = typer.Option([1, 8], "--streams", help="Concurrent streams (repeat)."),
    requests: int = typer.Option(0, "--requests", help="Requests per level (0: 4 x streams)."),
    output_tokens: int = typer.Option(128, "--output-tokens", help="Forced output length."),
    prompt_tokens: int = typer.Option(256, "--prompt-tokens", help="Prompt length, about."),
) -> None:
    """Output tokens/s at each number of concurrent streams (no prefix-cache help)."""
    from tuner.workload import run_throughput_sync

    table = Table(title="plain throughput (fixed output length, random prompt nonce)")
    for column in ("streams", "requests", "output tokens", "wall", "output tokens/s"):
        table.add_column(column, justify="right")
    for n in streams:
        if n < 1:
            raise ConfigError(f"--streams must be at least 1, not {n}")
        record = run_throughput_sync(
            url, model, streams=n, requests=requests or 4 * n,
            output_tokens=output_tokens, prompt_tokens=prompt_tokens,
        )  # fmt: skip
        table.add_row(
            str(n), str(record.requests), f"{record.output_tokens:,}",
            f"{record.wall_s:.2f} s", f"{record.output_tokens_per_s:.1f}",
        )  # fmt: skip
    console.print(table)
