"""The study's plan: everything decided before the loop starts, in one step and one object.

`plan_study` runs, in this order, what `tuner.study.search.driver` used to ask for piece by
piece:

1. the checks (`checks.preflight`: the installed vLLM's knobs, a GPU workload's window);
2. the model (a test model is built on first use);
3. the storage's tables (migrated, so the existing study can be read);
4. the dtype of a CPU preset with `model.dtype: by-cpu` (`dtype.resolve_dtype`: float32 on a
   CPU without bf16 instructions, with the KV choices doubled; a stored study keeps its own);
5. the space cut for the workload (`sizing.workload_reductions`; `--full-space`, or a study
   that searched the full space before, keeps it);
6. the workload's sizing (`WorkloadSizing`): the study's stored calibration when it has one;
   else, for a preset with a target window (`Preset.window_s`, CPU presets by default), a
   `SizingPlan` the study's first server start chooses from (a short prefill/decode probe right
   after the server is ready, then that trial's scored workload at the chosen size); else the
   preset's sizing. `--no-calibrate` keeps the preset's sizing, and a study that measured
   trials before it had a calibration keeps theirs: every trial of a study runs one sizing.

The calibration is stored as the study attribute `calibration`, and the stored preset is
rewritten with the chosen workload, so confirmation, `tuner explain` and `tuner sweep` (which
run the stored preset) and a resumed study (whose preset is compared with the stored one after
the stored calibration is applied) all use the same sizing.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.attrs import StudyAttr
from tuner.errors import ConfigError
from tuner.server.capabilities import VllmCapabilities
from tuner.study.preflight.calibration import sizing_plan
from tuner.study.preflight.checks import StartCheck, preflight
from tuner.study.preflight.dtype import resolve_dtype
from tuner.study.preflight.sizing import read_model_config, workload_reductions
from tuner.study.space import Preset
from tuner.workload.calibration import Calibration, SizingPlan
from tuner.workload.settings import WorkloadSettings

__all__ = [
    "UNREAD",
    "StoredStudy",
    "StudyPlan",
    "Unread",
    "WorkloadSizing",
    "apply_calibration",
    "plan_study",
    "read_stored_study",
    "reduce_space",
    "same_scores",
    "shortest_scored_window",
]

# Preset fields that decide what happens after the search, not how a trial is scored: a study
# resumed with other values stays comparable.
_AFTER_SEARCH = frozenset({"confirm", "load_sweep", "between_run"})


def same_scores(stored: dict[str, Any], preset: Preset) -> bool:
    """Whether trials scored under the stored preset compare with trials under `preset`.

    The stored JSON is validated first, so fields a newer tuner added with defaults compare
    as their defaults (a study made before a field existed still resumes), and the fields in
    `_AFTER_SEARCH` are left out.
    """
    try:
        old = Preset.model_validate(stored)
    except ValueError:
        return False
    return old.model_dump(exclude=set(_AFTER_SEARCH)) == preset.model_dump(
        exclude=set(_AFTER_SEARCH)
    )


def apply_calibration(preset: Preset, calibration: Calibration | None) -> Preset:
    """`preset` running the calibrated workload (unchanged without a calibration)."""
    if calibration is None:
        return preset
    return preset.model_copy(update={"workload": calibration.settings})


@dataclass(frozen=True)
class StoredStudy:
    """What an existing study already decided (`read_stored_study`)."""

    preset: dict[str, Any] | None
    calibration: Calibration | None
    sizing_off: str | None  # why the study keeps the preset's sizing, when it does
    measured: bool  # it has COMPLETE or PRUNED trials


class Unread:
    """The type of `UNREAD`: the stored study is not read yet (`plan_study` reads it)."""

    def __repr__(self) -> str:
        return "UNREAD"


# `plan_study(stored=UNREAD)`, the default: read the stored study here. A caller that read it
# already (`tuner.study.pipeline.run_study`, before its budget and estimate) passes its read.
UNREAD = Unread()


def _has_table(url: str, table: str) -> bool:
    """Whether the storage at `url` has `table` (read only: nothing is created)."""
    from sqlalchemy import inspect

    from tuner.storage.engine import open_engine

    engine = open_engine(url)
    try:
        return inspect(engine).has_table(table)
    finally:
        engine.dispose()


def shortest_scored_window(url: str, name: str) -> float | None:
    """The shortest scored window (s) of study `name`'s measured workload runs; None without.

    Reads only: a storage without tuner's tables is not given them.
    """
    from tuner.storage import Store

    if not _has_table(url, "tuner_workload_runs"):
        return None
    store = Store(url, migrate=False)
    try:
        windows = [
            run.record.scored_wall_s
            for number in store.trial_numbers(name)
            for run in store.workload_runs(name, number)
            if run.record.scored_wall_s
        ]
    finally:
        store.close()
    return min(windows) if windows else None


def read_stored_study(url: str, name: str) -> StoredStudy | None:
    """The stored preset and sizing of study `name`; None when the storage has no such study.

    Reads only: a storage without Optuna's tables is not given them.
    """
    from tuner.storage import normalize_url

    if not _has_table(url, "studies"):
        return None
    storage = optuna.storages.RDBStorage(normalize_url(url))
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    finally:
        with contextlib.suppress(Exception):
            storage.remove_session()
    attrs = study.user_attrs
    raw = attrs.get(StudyAttr.CALIBRATION)
    calibration = off = None
    if isinstance(raw, dict) and raw.get("calibrated") is False:
        off = str(raw.get("why") or "kept the preset's sizing")
    elif isinstance(raw, dict):
        calibration = Calibration.from_json(raw)
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    preset = attrs.get(StudyAttr.PRESET)
    return StoredStudy(
        preset=preset if isinstance(preset, dict) else None,
        calibration=calibration,
        sizing_off=off,
        measured=bool(study.get_trials(deepcopy=False, states=states)),
    )


@dataclass
class WorkloadSizing:
    """The workload every trial of the study runs; pending until the first server measures it.

    Mutable on purpose: the request factory reads it for every trial, and `record` fills it in
    when the first server's calibration comes back, so later trials run the chosen size.
    """

    workload: WorkloadSettings
    pending: SizingPlan | None = None
    calibration: Calibration | None = None
    # The study attribute to write when the study opens ({"calibrated": false, "why": ...}).
    keep_preset: str | None = None

    def store_decision(self, study: optuna.Study) -> None:
        """Write a 'keeps the preset's sizing' decision into a study that has none yet."""
        if self.keep_preset is not None and StudyAttr.CALIBRATION not in study.user_attrs:
            study.set_user_attr(
                StudyAttr.CALIBRATION, {"calibrated": False, "why": self.keep_preset}
            )

    def adopt_stored(self, study: optuna.Study) -> bool:
        """Take the calibration another driver of the study stored meanwhile (True: taken)."""
        raw = study.user_attrs.get(StudyAttr.CALIBRATION)
        if self.pending is None or not isinstance(raw, dict) or raw.get("calibrated") is False:
            return False
        stored = Calibration.from_json(raw)
        self.workload, self.calibration, self.pending = stored.settings, stored, None
        return True

    def record(
        self, study: optuna.Study, calibration: Calibration, say: Callable[[str], None]
    ) -> None:
        """Store the first server's calibration; every later trial runs its workload."""
        if self.pending is None:  # decided already (one sizing per study)
            return
        if self.adopt_stored(study):  # another driver's first server was first
            return
        study.set_user_attr(StudyAttr.CALIBRATION, calibration.to_json())
        stored = study.user_attrs.get(StudyAttr.PRESET)
        if isinstance(stored, dict):
            preset = Preset.model_validate(stored)
            calibrated = apply_calibration(preset, calibration)
            study.set_user_attr(StudyAttr.PRESET, json.loads(calibrated.model_dump_json()))
        self.workload = calibration.settings
        self.calibration = calibration
        self.pending = None
        say(calibration.line())


@dataclass(frozen=True)
class StudyPlan:
    """What `plan_study` decided: the preset to run and why it differs from the file."""

    preset: Preset  # checked, space cut, the stored calibration applied
    start: StartCheck
    model_path: str
    reductions: tuple[str, ...]
    sizing: WorkloadSizing
    lines: tuple[str, ...] = field(default=())  # what was said, in order


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def reduce_space(
    preset: Preset,
    *,
    model_path: str,
    full_space: bool,
    stored: StoredStudy | None,
    say: Callable[[str], None],
) -> tuple[Preset, list[str]]:
    """The space cut to what can matter for the workload, and one line per cut (also said).

    `--full-space` keeps the preset as written; so does a study that already searched the full
    space (its stored preset is the unreduced one), so resuming it stays comparable.
    """
    if full_space:
        return preset, []
    reduced, cuts = workload_reductions(preset, model_config=read_model_config(model_path))
    if not cuts:
        return preset, []
    if (
        stored is not None
        and stored.preset is not None
        and same_scores(stored.preset, apply_calibration(preset, stored.calibration))
    ):
        say(
            "space: this study searched the preset's full space before; kept (a new "
            "--study name gets the space reduced for the workload)"
        )
        return preset, []
    lines = [c.line() for c in cuts]
    for line in lines:
        say(f"{line} (--full-space searches every value)")
    return reduced, lines


def _sizing(
    preset: Preset,
    stored: StoredStudy | None,
    *,
    calibrate: bool,
    may_calibrate: bool,
    say: Callable[[str], None],
) -> WorkloadSizing:
    window = preset.window_s
    if stored is not None and stored.calibration is not None:
        if not calibrate:
            raise ConfigError(
                f"this study's workload was sized on its trial {stored.calibration.trial_number}"
                f" ({stored.calibration.sizing}); --no-calibrate cannot change a study's "
                "sizing: leave it out, or use a new --study name"
            )
        say(f"workload: this study's sizing, {stored.calibration.line()}")
        return WorkloadSizing(stored.calibration.settings, calibration=stored.calibration)
    if stored is not None and stored.sizing_off is not None:
        if window is not None:
            say(f"workload: the preset's sizing ({stored.sizing_off})")
        return WorkloadSizing(preset.workload)
    if window is None or not may_calibrate:
        return WorkloadSizing(preset.workload)
    if not calibrate:
        say("workload: the preset's sizing, not calibrated (--no-calibrate)")
        return WorkloadSizing(preset.workload, keep_preset="--no-calibrate")
    if stored is not None and stored.measured:
        why = "its trials were measured before it had a calibration"
        say(f"workload: the preset's sizing ({why})")
        return WorkloadSizing(preset.workload, keep_preset=why)
    if preset.gpu.slots > 1:
        why = "calibration sizes on one server, and this preset runs several at once"
        say(f"workload: the preset's sizing ({why})")
        return WorkloadSizing(preset.workload, keep_preset=why)
    say(
        f"workload: sized on the first server start (a prefill/decode probe once it is ready) "
        f"to fit a {window:.0f} s scored window; --no-calibrate keeps the preset's"
    )
    return WorkloadSizing(preset.workload, pending=sizing_plan(preset, window))


def plan_study(  # noqa: PLR0913 (the one preflight step: every input, keyword-only)
    preset: Preset,
    *,
    storage_url: str,
    study_name: str | None,
    cache_dir: Path,
    model_path: Callable[[Preset], str],
    full_space: bool = False,
    calibrate: bool = True,
    may_calibrate: bool = True,
    say: Callable[[str], None] = _stderr,
    quiet: bool = False,
    capabilities: VllmCapabilities | None = None,
    cpuinfo: str | None = None,
    stored: StoredStudy | Unread | None = UNREAD,
) -> StudyPlan:
    """Check `preset`, build its model and decide its space and sizing (see the module doc).

    Args:
        preset: The preset as loaded (with the CLI's overrides).
        storage_url: The study's storage (migrated here; the existing study is read).
        study_name: The study (None: the preset's name).
        cache_dir: tuner's cache (vLLM capabilities, models).
        model_path: Builds the model when needed; returns what `vllm serve` loads.
        full_space: Keep the preset's space as written.
        calibrate: False: keep the preset's sizing (`--no-calibrate`).
        may_calibrate: False where no trial of this run may calibrate (runs of queued extras:
            confirmation, controls).
        say: Where the one-line notes go.
        quiet: Say nothing about the space or the sizing (said once, by the search).
        capabilities: The installed vLLM's, when already known (tests).
        cpuinfo: /proc/cpuinfo's text for a `by-cpu` dtype (None: read it; tests pass one).
        stored: The study as `read_stored_study` read it at the start of this command (None:
            no such study yet); `UNREAD`: read it here, after the tables are migrated.

    Raises:
        ConfigError: a check failed, or `--no-calibrate` on a calibrated study.
    """
    from tuner.storage import Store

    said: list[str] = []

    def tell(line: str) -> None:
        said.append(line)
        if not quiet:
            say(line)

    # Runs of queued extras (confirmation, controls) repeat the study's measured workload: the
    # windows its trials measured are the evidence that it is long enough.
    study_scored_s = (
        None
        if may_calibrate
        else shortest_scored_window(storage_url, study_name or preset.study_name)
    )
    preset, start = preflight(
        preset,
        cache_dir=cache_dir,
        say=say,
        capabilities=capabilities,
        study_scored_s=study_scored_s,
    )
    path = model_path(preset)
    store = Store(storage_url)
    try:
        store.migrate()  # tuner's tables first, before Optuna touches the database
    finally:
        store.close()
    if isinstance(stored, Unread):
        stored = read_stored_study(storage_url, study_name or preset.study_name)
    preset, dtype_line = resolve_dtype(
        preset,
        stored=stored.preset if stored is not None else None,
        study_name=study_name,
        cpuinfo=cpuinfo,
    )
    if dtype_line is not None:
        tell(dtype_line)
    preset, reductions = reduce_space(
        preset, model_path=path, full_space=full_space, stored=stored, say=tell
    )
    sizing = _sizing(preset, stored, calibrate=calibrate, may_calibrate=may_calibrate, say=tell)
    return StudyPlan(
        preset=apply_calibration(preset, sizing.calibration),
        start=start,
        model_path=path,
        reductions=tuple(reductions),
        sizing=sizing,
        lines=tuple(said),
    )
