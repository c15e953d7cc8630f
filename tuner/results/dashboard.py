"""`tuner dashboard`, and the answer written into it: optuna-dashboard alone says what to deploy.

optuna-dashboard shows every trial's user attributes (KV cache tokens, tasks/h and interval,
cache hit %, failure kind...), which is why the study writes its measurements there too. When a
study finishes (the end of `tuner optimize`, and after `tuner confirm`) `publish_answer` writes:

- the study's note (`study_note`): the workload mode and what its numbers mean, the
  recommendation of `tuner export` (`choose_export`, the one decision; called, not copied) with
  its reason, its evidence and the `vllm serve` command exactly as `tuner export` prints it, and
  the confirmation table;
- the report's plots (`tuner.results.plots.render_plots`) as Optuna artifacts of the study, in a
  `FileSystemArtifactStore` next to a SQLite file (`study.db` -> `study-artifacts/`), or under
  the user's data directory for a server database; publishing again replaces them in place.

`tuner dashboard` rewrites every study's note when it starts (studies of an older tuner get the
answer too) and serves the artifact store, so the plots open from the study's page.
"""

from __future__ import annotations

import mimetypes
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optuna_dashboard import run_server

from tuner.attrs import StudyAttr
from tuner.errors import ConfigError, StudyError
from tuner.results.decision import judge_study
from tuner.results.export import choose_export
from tuner.results.export_render import render_export
from tuner.results.rows import StudyResults
from tuner.results.study_reader import load_results, open_optuna_storage
from tuner.results.words import DUMMY_WEIGHTS_LINE, mode_line, tph_label

if TYPE_CHECKING:
    import optuna
    from optuna.artifacts import FileSystemArtifactStore

__all__ = [
    "annotate_studies",
    "artifact_dir",
    "publish_answer",
    "serve_dashboard",
    "study_note",
    "study_page",
]

_ARTIFACT_PREFIX = "artifacts:"  # optuna.artifacts' key in the study's system attributes


def _answer(results: StudyResults) -> list[str]:
    """The recommendation: what to deploy, why, and the command with its evidence."""
    try:
        choice = choose_export(results)
    except StudyError as exc:
        return ["### What to deploy", "", f"Nothing to deploy yet: {exc.message}"]
    t = choice.trial
    base = choice.baseline
    what = "no speculation (the baseline)" if base and base.number == t.number else t.label
    try:
        command = render_export(choice, "shell").rstrip("\n")
    except StudyError as exc:
        command = f"# {exc.message}"
    return [
        f"### What to deploy: trial #{t.number}, {what}",
        "",
        f"**Why:** {choice.reason}",
        "",
        "The command and its evidence, as `tuner export` prints them "
        "(`tuner export --format systemd|compose|json|yaml` for the other forms):",
        "",
        "```bash",
        command,
        "```",
    ]


def study_note(results: StudyResults, plots: list[str] | None = None) -> str:
    """The study's Markdown note: its mode, the recommendation and evidence, the plots."""
    lines = [f"## {results.study_name}", ""]
    lines.append(f"**Workload mode: {mode_line(results.mode, results.mode_note)}**")
    if results.dummy_weights:
        lines.append(f"**Weights: {DUMMY_WEIGHTS_LINE}**")
    lines += ["", *_answer(results)]
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
            "### Every config against the baseline",
            "",
            f"| trial | config | search-time {label} | confirmed {label} | paired vs baseline "
            "| outputs |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    if plots:
        lines += [
            "",
            "### Plots",
            "",
            "Attached to this study as artifacts (the study's Artifacts section): "
            + ", ".join(plots),
        ]
    return "\n".join(lines) + "\n"


def artifact_dir(url: str) -> Path:
    """Where a storage's artifacts live: beside a SQLite file, else in the user's data dir."""
    from sqlalchemy.engine import make_url

    from tuner.settings import get_settings
    from tuner.storage import normalize_url

    parsed = make_url(normalize_url(url))
    db = parsed.database
    if parsed.get_backend_name() == "sqlite" and db and db != ":memory:" and "file:" not in db:
        path = Path(db).expanduser()
        return path.with_name(f"{path.stem}-artifacts")
    return get_settings().data_path() / "artifacts"


def _artifact_store(url: str) -> FileSystemArtifactStore:
    from optuna.artifacts import FileSystemArtifactStore

    path = artifact_dir(url)
    path.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(path))


def _attached(study: optuna.Study) -> dict[str, str]:
    """filename -> artifact id of the study's own artifacts."""
    import json

    out = {}
    for key, value in study._storage.get_study_system_attrs(study._study_id).items():
        if key.startswith(_ARTIFACT_PREFIX):
            meta: Any = json.loads(value) if isinstance(value, str) else None
            if isinstance(meta, dict) and "filename" in meta:
                out[str(meta["filename"])] = str(meta["artifact_id"])
    return out


def _attach_plots(url: str, study: optuna.Study, results: StudyResults) -> list[str]:
    """Render the report's plots and store them as the study's artifacts; their names."""
    import io

    from optuna.artifacts import upload_artifact

    from tuner.results.plots import render_plots  # matplotlib: only when publishing

    pngs = render_plots(results)
    store = _artifact_store(url)
    attached = _attached(study)
    with tempfile.TemporaryDirectory(prefix="tuner-plots-") as tmp:
        for name, png in pngs.items():
            if name in attached:  # publishing again: the same artifact, new content
                store.write(attached[name], io.BytesIO(png))
                continue
            path = Path(tmp) / name
            path.write_bytes(png)
            upload_artifact(
                artifact_store=store,
                file_path=str(path),
                study_or_trial=study,
                mimetype=mimetypes.guess_type(name)[0] or "image/png",
            )
    return sorted(pngs)


def publish_answer(url: str, study_name: str, *, plots: bool = True) -> list[str]:
    """Write the study's note (the answer) and, with `plots`, attach the report's plots.

    Returns the names of the plots the study has attached.
    """
    import optuna
    from optuna_dashboard import save_note

    results = load_results(url, study_name)
    storage = open_optuna_storage(url)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
        if results.mode:
            study.set_user_attr(StudyAttr.MODE, results.mode)
            study.set_user_attr(StudyAttr.MODE_NOTE, results.mode_note)
        names = _attach_plots(url, study, results) if plots else sorted(_attached(study))
        save_note(study, study_note(results, names))
    finally:
        storage.engine.dispose()
    return names


def annotate_studies(url: str) -> int:
    """Write each study's note (the answer); plots already attached are listed, not redrawn."""
    storage = open_optuna_storage(url)
    try:
        names = [s.study_name for s in storage.get_all_studies()]
    finally:
        storage.engine.dispose()
    for name in names:
        publish_answer(url, name, plots=False)
    return len(names)


def study_page(url: str, study_name: str) -> str:
    """The path of the study's page in optuna-dashboard (/dashboard/studies/ID)."""
    storage = open_optuna_storage(url)
    try:
        study_id = storage.get_study_id_from_name(study_name)
    finally:
        storage.engine.dispose()
    return f"/dashboard/studies/{study_id}"


def serve_dashboard(url: str, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve optuna-dashboard for the studies at `url`, with their artifacts, until interrupted.

    Raises:
        StorageError: the URL cannot be opened.
        ConfigError: the address cannot be bound (port in use, no such interface).
    """
    annotate_studies(url)
    storage = open_optuna_storage(url)
    try:
        run_server(storage, host=host, port=port, artifact_store=_artifact_store(url))
    except OSError as exc:
        raise ConfigError(
            f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}; "
            "choose another --port or --host"
        ) from None
