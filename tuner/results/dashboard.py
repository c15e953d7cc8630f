"""`tuner dashboard`: optuna-dashboard on the study storage, bound to 127.0.0.1 by default.

optuna-dashboard shows every trial's user attributes (KV cache tokens, tasks/h and interval,
cache hit %, failure kind...), which is why the study writes its measurements there too. The
study's note (`study_note`, written by the confirmation stage and, for older studies, when the
dashboard starts) says what the numbers mean in the study's workload mode, and lists the
confirmed configs with their search-time and confirmed values and any that change outputs.
"""

from __future__ import annotations

from optuna_dashboard import run_server

from tuner.attrs import StudyAttr
from tuner.errors import ConfigError
from tuner.results.decision import judge_study
from tuner.results.loading import StudyResults, load_results, open_optuna_storage
from tuner.results.words import mode_line, tph_label


def study_note(results: StudyResults) -> str:
    """The study's Markdown note for optuna-dashboard: its mode, confirmation and flags."""
    lines = [f"## {results.study_name}", ""]
    lines.append(f"**Workload mode: {mode_line(results.mode, results.mode_note)}**")
    label = tph_label(results.mode)
    rows = []
    for v in judge_study(results).values():
        confirmed = f"{v.confirmed_tph:,.0f}" if v.confirmed_tph is not None else "not confirmed"
        search = f"{v.search_tph:,.0f}" if v.search_tph is not None else "not measured"
        paired = v.paired.describe() if v.paired is not None else "not paired"
        rows.append(
            f"| #{v.trial.number} | {v.trial.label} | {search} | {confirmed} | {paired} | "
            f"{v.correctness()} |"
        )
    if rows:
        lines += [
            "",
            f"| trial | config | search-time {label} | confirmed {label} | paired vs baseline "
            "| outputs |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    return "\n".join(lines) + "\n"


def annotate_studies(url: str) -> int:
    """Write each study's note and mode attributes; returns how many studies were annotated."""
    import optuna
    from optuna_dashboard import save_note

    storage = open_optuna_storage(url)
    count = 0
    for summary in storage.get_all_studies():
        results = load_results(url, summary.study_name)
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        if results.mode:
            study.set_user_attr(StudyAttr.MODE, results.mode)
            study.set_user_attr(StudyAttr.MODE_NOTE, results.mode_note)
        save_note(study, study_note(results))
        count += 1
    return count


__all__ = ["annotate_studies", "serve_dashboard", "study_note", "study_page"]


def study_page(url: str, study_name: str) -> str:
    """The path of the study's page in optuna-dashboard (/dashboard/studies/ID)."""
    storage = open_optuna_storage(url)
    try:
        study_id = storage.get_study_id_from_name(study_name)
    finally:
        storage.engine.dispose()
    return f"/dashboard/studies/{study_id}"


def serve_dashboard(url: str, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve optuna-dashboard for the studies at `url` until interrupted.

    Raises:
        StorageError: the URL cannot be opened.
        ConfigError: the address cannot be bound (port in use, no such interface).
    """
    annotate_studies(url)
    storage = open_optuna_storage(url)
    try:
        run_server(storage, host=host, port=port)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}; "
            "choose another --port or --host"
        ) from None
