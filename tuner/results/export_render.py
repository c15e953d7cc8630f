"""`tuner export`'s output: the chosen server in one of `FORMATS` (a command, a unit file, a
compose service, or its JSON/YAML document), each starting with comment lines that say what was
measured and why this config (`tuner.results.export.choose_export` made the choice).
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tuner.errors import ConfigError, StudyError, first_error
from tuner.results.emulated import for_the_emulated_card
from tuner.results.export import ExportChoice, _bounds, _evidence, _score, _tph
from tuner.results.formats import compose_service, image_for, portable, shell_text, systemd_unit
from tuner.results.rows import TrialRow
from tuner.results.words import DUMMY_WEIGHTS_LINE, done_word, mode_line, tph_key, tph_label
from tuner.server.spec import ServerSpec
from tuner.workload.reuse import three_way

__all__ = ["FORMATS", "render_export", "serve_argv"]

FORMATS: Final = ("shell", "json", "yaml", "systemd", "compose")


def serve_argv(trial: TrialRow) -> list[str]:
    """The trial's `vllm serve MODEL ...` argv, every flag it was launched with.

    The preset's environment stays in front; the GPU pin of the trial's slot
    (`CUDA_VISIBLE_DEVICES`) does not: it named a device of the measuring machine.

    Raises:
        StudyError: the trial recorded neither its serve command nor its server spec.
    """
    if trial.serve_command:
        return portable(shlex.split(trial.serve_command))
    if trial.server_spec is not None:
        try:
            spec = ServerSpec.model_validate(trial.server_spec)
            return portable(shlex.split(spec.serve_command()))
        except ValidationError as exc:
            raise StudyError(
                f"trial #{trial.number}'s recorded server spec no longer validates: "
                f"{first_error(exc)[1]}"
            ) from None
    raise StudyError(f"trial #{trial.number} recorded no serve command; re-run the trial")


def _done_word(choice: ExportChoice) -> str:
    # Replay and traces force the turns: a task counts when it finishes, nobody grades it.
    return done_word(choice.mode)


def _measured(choice: ExportChoice, t: TrialRow) -> dict[str, Any]:
    low, high = _bounds(t)
    out: dict[str, Any] = {
        "trial": t.number,
        "config": t.label,
        tph_key(choice.mode): _tph(t),
        "interval": [low, high],
        _done_word(choice): t.successes,
        "tasks": t.tasks,
        "kv_cache_tokens": t.kv_cache_tokens,
        "prompt_tokens_from_cache_pct": t.cache_hit_pct,
        "preemptions": t.preemptions,
    }
    if t.reuse is not None:
        all_, short, none = three_way(
            {"all": t.reuse.all, "one_block_short": t.reuse.one_block_short,
             "partial": t.reuse.partial, "none": t.reuse.none}
        )  # fmt: skip
        out["reuse_steps"] = {"all": all_, "short": short, "none": none, "of": t.reuse.total}
    if t.block_size is not None:
        out["block_size"] = t.block_size
    if t.mamba_cache_mode is not None:
        out["mamba_cache_mode"] = t.mamba_cache_mode
    if t.dummy_weights:
        out["dummy_weights"] = True
    v = choice.verdicts.get(t.number)
    if v is not None:
        out["confirmed_tasks_per_hour"] = v.confirmed_tph
        out["confirmation_runs"] = v.confirmed_runs
        if v.paired is not None:
            p = v.paired
            out["paired_ratio_to_baseline"] = {
                "ratio": p.ratio,
                "interval": [p.low, p.high],
                "rounds": p.rounds,
                "p_value": p.p_value,
                "between_run_log_sd": p.noise.log_sd,
            }
        out["correctness"] = v.correctness()
        out["changes_outputs"] = v.changes_outputs
        if v.failed_runs:
            out["failed_confirmation_starts"] = list(v.failed_runs)
    return out


def _comment_lines(choice: ExportChoice) -> list[str]:
    t, base = choice.trial, choice.baseline
    where = ", ".join(
        x for x in (f"model {choice.model}" if choice.model else "", choice.gpu or "") if x
    )
    lines = [f"tuner export: study {choice.study_name!r}" + (f" ({where})" if where else "")]
    if choice.mode:
        lines.append(f"workload mode: {mode_line(choice.mode, choice.mode_note)}")
    if not choice.confirmed and base is not None:
        lines.append(
            "unconfirmed: no confirmation rounds; judged on one search-time run per config "
            "(interval includes the between-run term); `tuner confirm --study "
            f"{choice.study_name}` re-runs the top configs"
        )
    if choice.stopped:
        lines.append(choice.stopped)
    if choice.noise and base is not None:
        lines.append(choice.noise)
    lines += [
        f"trial #{t.number}: {t.label}",
        f"{tph_label(choice.mode)}: {_score(t)} (search-time run: estimate [interval low, high])",
    ]
    v = choice.verdict
    if v is not None:
        if v.confirmed and v.confirmed_tph is not None:
            lines.append(
                f"confirmed: {v.confirmed_tph:,.0f} {tph_label(choice.mode)} over "
                f"{v.confirmed_runs} fresh starts"
            )
        lines.append(_evidence(v))
        lines.append(f"correctness: {v.correctness()}")
    if base is not None and base.number != t.number:
        lines.append(f"baseline (no speculation, #{base.number}): {_score(base)}")
    if not choice.confirmed and choice.best.number != t.number:
        b = choice.best
        lines.append(f"best search config (unconfirmed): #{b.number} {b.label} at {_score(b)}")
    facts = []
    if t.successes is not None and t.tasks is not None:
        facts.append(f"{_done_word(choice)} {t.successes} of {t.tasks} tasks")
    kv = f"{t.kv_cache_tokens:,}" if t.kv_cache_tokens is not None else "not measured"
    facts.append(f"KV cache tokens: {kv}")
    hit = f"{t.cache_hit_pct:.0f}%" if t.cache_hit_pct is not None else "not measured"
    facts.append(f"prompt tokens from the cache: {hit}")
    lines.append("; ".join(facts))
    for who, row in (("this config", t), ("baseline", base)):
        if (
            row is not None
            and (who == "this config" or row.number != t.number)
            and row.reuse_line()
        ):
            lines.append(f"{who}: {row.reuse_line()}")
    if t.dummy_weights or (base is not None and base.dummy_weights):
        lines.append(DUMMY_WEIGHTS_LINE)
    lines.append(f"why this one: {choice.reason}")
    return lines


def _document(choice: ExportChoice, argv: list[str]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "study": choice.study_name,
        "mode": choice.mode,
        "mode_note": choice.mode_note,
        "argv": argv,
        "command": shlex.join(argv),
        "measured": _measured(choice, choice.trial),
        "baseline": _measured(choice, choice.baseline) if choice.baseline is not None else None,
        "reason": choice.reason,
        "confirmed": choice.confirmed,
        "between_run_noise": choice.noise,
        "win_level": choice.level,
        "confirmation_stopped": choice.stopped,
    }
    if choice.fell_back:
        doc["best"] = _measured(choice, choice.best)
    return doc


def render_export(choice: ExportChoice, fmt: str = "shell") -> str:
    """The chosen server in format `fmt` (one of `FORMATS`), headed by measurement comments.

    Raises:
        ConfigError: unknown format.
        StudyError: the trial has no recorded command (see `serve_argv`).
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    argv, emulation = for_the_emulated_card(choice.trial, serve_argv(choice.trial))
    header = "".join(f"# {line}\n" for line in _comment_lines(choice))
    header += f"# {emulation}\n" if emulation else ""
    if fmt == "json":
        return json.dumps(_document(choice, argv), indent=2) + "\n"
    if fmt == "yaml":
        return header + yaml.safe_dump(_document(choice, argv), sort_keys=False, width=1000)
    if fmt == "systemd":
        return header + systemd_unit(choice.study_name, choice.trial.number, argv)
    if fmt == "compose":
        image = image_for(choice.trial.vllm_version)
        return header + compose_service(argv, image=image, trial_number=choice.trial.number)
    return header + shell_text(argv, choice.trial.launched)
