"""The live study display shows trials done, each slot's config and state, tasks, best so far."""

from __future__ import annotations

import io

from rich.console import Console

from tuner.results.configs import describe_config_short
from tuner.study.search.display import SlotView, StudyDisplay


def test_describe_params_names_every_knob() -> None:
    label = describe_config_short(
        {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 5,
            "kv_cache_memory_bytes": 2_000_000_000,
            "max_num_seqs": 8,
        }
    )
    assert label == "ngram d3 [2,5] kv 2.0GB seqs 8"
    assert describe_config_short({"method": "mtp", "num_speculative_tokens": 1,
                            "gpu_memory_utilization": 0.9, "max_num_seqs": 512,
                            "disable_eagle_block_drop": True}) == (
        "mtp d1 mem 0.90 seqs 512 keep-block"
    )  # fmt: skip


def test_display_renders_slots_progress_and_best() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False, color_system=None)
    display = StudyDisplay(total=4, study_name="demo", console=console, slots=[SlotView()])
    display.slots[0] = SlotView(
        trial=2, label="ngram d3", state="workload", tasks_done=5, tasks_total=12,
        tasks_per_hour=1234.4,
    )  # fmt: skip
    display.best = "trial 1: 1500.0 tasks/h (ngram d2)"
    with display:
        display.update(finished=1)
    text = out.getvalue()
    assert "study demo" in text and "1/4" in text
    assert "ngram d3" in text and "workload" in text and "5/12" in text and "1234" in text
    assert "best so far: trial 1: 1500.0 tasks/h (ngram d2)" in text
