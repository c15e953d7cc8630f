"""`tuner export`: the server a user should run, as a command, a unit file or a compose service.

`choose_export` picks the trial: a config that beats the baseline (no speculation) on its paired
rounds, Holm-corrected over the configs judged, else the baseline, with the reason; without
confirmation rounds the choice is labelled "unconfirmed".
The published lesson (docs/workload.md) is that on agent traffic "no speculation" is often the
right answer, so a speculative config has to earn its place. `render_export` writes the choice
in one of `FORMATS`, each starting with comment lines that say what was measured.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tuner.errors import ConfigError, StudyError, first_error
from tuner.metrics import PairedEstimate
from tuner.results.decision import Verdict, judge_study, study_noise
from tuner.results.emulated import for_the_emulated_card
from tuner.results.export_rule import WIN_ALPHA, Look, export_winner, look_level, next_look
from tuner.results.formats import (
    DEFAULT_IMAGE,
    IMAGE_ENTRYPOINT,
    compose_service,
    image_for,
    portable,
    shell_text,
    split_env,
    systemd_quote,
    systemd_unit,
)
from tuner.results.rows import StudyResults, TrialRow
from tuner.results.words import DUMMY_WEIGHTS_LINE, done_word, mode_line, tph_key, tph_label
from tuner.server.spec import ServerSpec
from tuner.workload.reuse import three_way

__all__ = [
    "DEFAULT_IMAGE",
    "FORMATS",
    "IMAGE_ENTRYPOINT",
    "ExportChoice",
    "choose_export",
    "confirmation_look",
    "render_export",
    "serve_argv",
    "split_env",
    "systemd_quote",
]

FORMATS: Final = ("shell", "json", "yaml", "systemd", "compose")


@dataclass(frozen=True)
class ExportChoice:
    """The trial to export, the best-scoring one, the baseline, and why this one."""

    trial: TrialRow
    best: TrialRow
    baseline: TrialRow | None
    reason: str
    study_name: str
    model: str | None = None
    gpu: str | None = None
    verdicts: Mapping[int, Verdict] = field(default_factory=dict)
    mode: str | None = None
    mode_note: str | None = None
    confirmed: bool = False  # judged on confirmation rounds (False: "unconfirmed")
    judged: int = 0  # configs the win test was corrected over (Holm)
    noise: str = ""  # the between-run noise the verdicts used and where it came from
    stopped: str | None = None  # a sequential confirmation: rounds run and why it stopped
    level: float = 0.025  # the one-sided family-wise level the win test used

    @property
    def fell_back(self) -> bool:
        """True when the exported trial is not the best-scoring one (the baseline, or a config
        that passed the paired test where the top one did not)."""
        return self.trial.number != self.best.number

    @property
    def verdict(self) -> Verdict | None:
        """The exported config's evidence against the baseline (None for the baseline)."""
        return self.verdicts.get(self.trial.number)


def _tph(t: TrialRow) -> float:
    return t.tasks_per_hour if t.tasks_per_hour is not None else (t.value or 0.0)


def _bounds(t: TrialRow) -> tuple[float, float]:
    # A trial without an interval counts as a point: the comparison stays defined.
    low = t.tasks_per_hour_low if t.tasks_per_hour_low is not None else _tph(t)
    high = t.tasks_per_hour_high if t.tasks_per_hour_high is not None else _tph(t)
    return low, high


def _score(t: TrialRow) -> str:
    low, high = _bounds(t)
    return f"{_tph(t):,.0f} [{low:,.0f}, {high:,.0f}]"


def _evidence(v: Verdict) -> str:
    if v.paired is None:
        return v.problems() or "no paired measurement with the baseline"
    where = (
        "on its confirmation rounds" if v.confirmed else "on its one search-time run (unconfirmed)"
    )
    text = f"paired tasks/h ratio to the baseline {where}: {v.paired.describe()}"
    if v.drift is not None:
        text += f"; against {v.drift.describe()}"
    problems = v.problems()
    return f"{text}; {problems}" if problems else text


def _tests(pool: Mapping[int, Verdict]) -> dict[int, PairedEstimate | None]:
    # A config that changes outputs or could not start reliably cannot win, but was judged.
    return {
        n: (v.paired if not v.changes_outputs and not v.unreliable else None)
        for n, v in sorted(pool.items())
    }


def confirmation_look(results: StudyResults, rounds: int, first: int, cap: int) -> Look:
    """The sequential confirmation's look after `rounds` rounds: stop (a winner, or nothing
    left worth more rounds, or the cap) or run another (`tuner.results.export_rule.next_look`),
    on the same verdicts and tests `choose_export` uses."""
    verdicts = judge_study(results)
    pool = {n: v for n, v in verdicts.items() if v.confirmation_attempted}
    return next_look(_tests(pool), rounds, first, cap)


def _noise_line(results: StudyResults, confirmed: bool) -> str:
    prior = results.noise
    reruns = results.baseline_reruns()
    if reruns:
        # The search measured its own noise and drift: say the prior, the own repeats and
        # the drift correction (the sd and df every unconfirmed verdict started from).
        used = study_noise(results)
        every = results.baseline_every
        how = (
            "search-time scores are ratios to the baseline's rate interpolated in run order "
            f"between the baseline starts that bracket each trial ({len(reruns)} re-run"
            f"{'s' if len(reruns) != 1 else ''} of the baseline during the search"
            + (f", every {every} trial{'s' if every != 1 else ''}" if every else "")
            + "; after the last start, the latest one)"
        )
        then = (
            "; each confirmed verdict then starts from the prior and adds its own rounds, "
            "which alternate their order (A B, B A) so a linear drift cancels"
            if confirmed
            else ""
        )
        return f"between-run noise: {used.describe()}; {how}{then}"
    if results.baseline_every == 0:
        prior_note = " (no re-runs of the baseline during the search: --baseline-every 0)"
    else:
        prior_note = ""
    own = (
        "each confirmed verdict adds its own rounds' spread (conjugate update), and the "
        "rounds alternate their order (A B, B A) so a linear drift of the machine cancels"
        if confirmed
        else "updated by this study's own baseline starts (conjugate update; their spread "
        "includes the machine's drift between them); search-time scores are not drift-corrected"
        + prior_note
    )
    return (
        f"between-run noise: the prior sd {prior.log_sd:.3f} of a round's log ratio over "
        f"{prior.df} df ({prior.source}), {own}"
    )


def _stop_line(results: StudyResults) -> str | None:
    if results.confirm_looks is None:
        return None
    first, cap = results.confirm_looks
    if results.confirm_stop is None:
        return f"confirmation: sequential, up to {cap} rounds; not finished (`tuner confirm`)"
    rounds, why = results.confirm_stop
    return (
        f"confirmation: {rounds} round{'s' if rounds != 1 else ''} of up to {cap} "
        f"(sequential, first look after {first}); stopped: {why}"
    )


def choose_export(results: StudyResults) -> ExportChoice:
    """Pick the trial to export from a study.

    Candidates are picked on the search and judged on the confirmation. When the confirmation
    stage ran, only the configs it re-ran are judged, on their paired rounds alone (their
    search-time runs were picked for being high and are not evidence). Without it (`--confirm
    0`, or no confirmation round of any candidate could be paired), every candidate is judged
    on its one search-time run, and the export says "unconfirmed". Either way a config
    "beats the baseline" only when its paired test passes Holm's correction over all the
    configs judged (family-wise one-sided 2.5%), its interval includes the between-run term,
    it did not change outputs and none of its confirmation starts failed. The best such config
    by paired ratio is exported, else the baseline.

    Raises:
        StudyError: the study has no completed feasible trial yet.
    """
    candidates = [t for t in results.trials if t.exportable]
    if not candidates:
        raise StudyError(
            f"study {results.study_name!r} has no completed feasible trial to export yet; "
            "run `tuner optimize` until one completes"
        )
    base = results.baseline
    verdicts = judge_study(results)
    attempted = {n: v for n, v in verdicts.items() if v.confirmation_attempted}
    confirmed_mode = any(v.confirmed or v.unreliable for v in attempted.values())
    pool = attempted if confirmed_mode else verdicts
    ranked = sorted(pool.values(), key=lambda v: (-(v.estimate or 0.0), v.trial.number))
    # Ties go to the lower trial number: the baseline runs first, and it is the simpler server.
    best = max(candidates, key=lambda t: (_tph(t), -t.number))
    base_estimate = None
    if ranked and base is not None:
        # Like against like: a confirmed candidate meets the baseline's runs of its own rounds.
        top_v = ranked[0]
        base_estimate = (
            top_v.base_confirmed_tph
            if confirmed_mode and top_v.base_confirmed_tph is not None
            else _tph(base)
        )
        top = top_v.trial
        best = top if (top_v.estimate or 0.0) > base_estimate else base
    tests = _tests(pool)
    level = WIN_ALPHA
    if confirmed_mode and results.confirm_looks is not None:
        # A sequential confirmation: the level of the look it stopped at (its rounds).
        rounds = max((v.paired.rounds for v in pool.values() if v.paired), default=1)
        level = look_level(rounds, *results.confirm_looks)
    winner = export_winner(tests, level) if base is not None else None
    label = "" if confirmed_mode else "unconfirmed: "

    def choice(trial: TrialRow, reason: str) -> ExportChoice:
        return ExportChoice(
            trial=trial,
            best=best,
            baseline=base,
            reason=label + reason,
            study_name=results.study_name,
            model=results.model,
            gpu=results.gpu,
            verdicts=verdicts,
            mode=results.mode,
            mode_note=results.mode_note,
            confirmed=confirmed_mode,
            judged=len(pool),
            noise=_noise_line(results, confirmed_mode),
            stopped=_stop_line(results) if confirmed_mode else None,
            level=level,
        )

    if base is None:
        return choice(
            best, f"no baseline was measured, so trial #{best.number} is exported unchallenged"
        )
    if winner is not None:
        win = pool[winner]
        assert win.paired is not None
        m = len(pool)
        reason = (
            f"#{win.trial.number} beats the baseline (no speculation): {_evidence(win)}; "
            f"one-sided p = {win.paired.p_value:.2g}, Holm-corrected over {m} "
            f"config{'s' if m != 1 else ''} judged at family-wise {level:.2g}"
        )
        if win.trial.number != best.number and best.number != base.number:
            other = verdicts[best.number]
            why_not = "it changes outputs" if other.changes_outputs else _evidence(other)
            reason += f"; #{best.number} scored higher but did not pass ({why_not})"
        return choice(win.trial, reason)
    if not ranked:
        return choice(
            base,
            f"no speculation (the baseline, #{base.number}) did the most "
            f"{tph_label(results.mode)}: "
            f"{_score(base)}",
        )
    if best.number == base.number:
        what = (
            f"confirmed: {base_estimate or 0.0:,.0f}"
            if confirmed_mode
            else f"search-time: {_score(base)}"
        )
        return choice(
            base,
            f"no speculation (the baseline, #{base.number}) did the most "
            f"{tph_label(results.mode)} "
            f"({what}); the best other config, "
            f"#{ranked[0].trial.number}, had {_evidence(ranked[0])}",
        )
    top_verdict = verdicts[best.number]
    if top_verdict.unreliable:
        why = f"it could not start reliably ({top_verdict.problems()})"
    elif top_verdict.changes_outputs:
        why = f"it changes outputs ({top_verdict.correctness()})"
    else:
        why = (
            f"it is not faster beyond the noise (Holm-corrected over {len(pool)} "
            f"config{'s' if len(pool) != 1 else ''} judged): {_evidence(top_verdict)}"
        )
    # The published lesson applies to speculation; a memory-only change gets a plainer why.
    lesson = (
        "on agent traffic speculation often costs more (KV cache, prefix reuse) than it gains"
        if best.method != "none"
        else "the baseline's default settings are the simpler server"
    )
    return choice(
        base,
        f"the best config, #{best.number} ({best.label}) at {_score(best)} "
        f"{tph_label(results.mode)}, does not "
        f"beat the baseline (no speculation) at {_score(base)}: {why}; so the baseline is "
        f"exported: {lesson}",
    )


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
