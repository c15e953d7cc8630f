"""The words a number is printed with, by workload mode: the one place they are chosen.

A live study grades each task's answers, so its score is *successful* tasks per hour. Replay
forces every turn and grades nothing (a task counts when it finishes in time), and a traces study
replays a user's recorded conversations the same way: both say *completed* tasks per hour, and a
traces study names the file it replayed where it is known. A study whose mode was not recorded
says plain "tasks/h". Every output (the progress lines, export's formats, the report, its plots,
the dashboard's note) takes its words from here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["counted_word", "done_word", "mode_line", "tph_key", "tph_label", "tph_title", "worded"]

_COUNTED = {"live": "successful", "replay": "completed", "traces": "completed"}


def counted_word(mode: str | None) -> str:
    """ "successful" (live), "completed" (replay, traces), "" (mode not recorded)."""
    return _COUNTED.get(mode or "", "")


def worded(text: str, mode: str | None) -> str:
    """`text` written for the live mode ("successful tasks/h", "energy per successful task")
    in `mode`'s words."""
    word = counted_word(mode)
    out = text.replace("successful tasks/h", tph_label(mode))
    return out.replace("successful task", f"{word} task" if word else "task")


def tph_label(mode: str | None) -> str:
    """ "successful tasks/h" (live), "completed tasks/h" (replay, traces), else "tasks/h"."""
    word = _COUNTED.get(mode or "")
    return f"{word} tasks/h" if word else "tasks/h"


def tph_title(mode: str | None) -> str:
    """The long form for titles and axes: "successful tasks / hour" and so on."""
    word = _COUNTED.get(mode or "")
    return f"{word} tasks / hour" if word else "tasks / hour"


def tph_key(mode: str | None) -> str:
    """The machine-readable key: successful_tasks_per_hour, completed_tasks_per_hour, ..."""
    word = _COUNTED.get(mode or "")
    return f"{word}_tasks_per_hour" if word else "tasks_per_hour"


def done_word(mode: str | None) -> str:
    """What a counted task is: "solved" when graded (live), "completed" otherwise."""
    return "solved" if mode == "live" else "completed"


def mode_line(mode: str | None, note: str | None = None, traces: str | None = None) -> str:
    """One line saying what the mode measured, e.g. "replay (load shape: answers not graded)".

    A traces study names its file when `traces` is given ("traces: replayed calls.jsonl ...").
    """
    what = mode or "not recorded"
    if mode == "traces" and traces:
        what = f"traces (replayed {Path(traces).name})"
    return f"{what} ({note})" if note else what


# Said wherever a study's trials ran on random weights (`--load-format dummy`): such a model
# repeats one token, so n-gram accepts nearly every draft and MTP nearly none.
DUMMY_WEIGHTS_LINE = (
    "dummy weights (--load-format dummy): acceptance is not measured; the verdict is about "
    "memory and cache reuse, not about which method to deploy"
)
