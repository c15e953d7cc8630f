"""Study-start checks: the space follows the installed vLLM, and the workload is long enough.

Two calls in the study loop (`tuner.study.search.driver`):

1. `preflight(preset, cache_dir=...)` before the study is opened: ask the vLLM that
   `TUNER_VLLM_COMMAND` runs what it accepts (`tuner.server.capabilities`), leave out the
   searched knobs it lacks (one stderr line per knob), refuse fixed parts it lacks (one
   `ConfigError` line naming them), and refuse a GPU workload too short to measure
   (`tuner.study.preflight.sizing`); a command that starts no vLLM (tuner's fake server) skips both.
   It returns the preset to run, so the stored preset is the space actually searched.
2. `StartCheck.record(study)` once the study is open: the vLLM version and the knobs it lacks
   become study attributes (`tuner explain` reads them, so it never plans a control the server
   cannot start). A study measured with another vLLM version is refused: its scores would not
   be comparable.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from tuner.attrs import StudyAttr
from tuner.errors import ConfigError, StudyError
from tuner.server.capabilities import VllmCapabilities, read_launch_capabilities
from tuner.settings import get_settings
from tuner.study.preflight.sizing import check_sizing
from tuner.study.space import Preset

__all__ = ["StartCheck", "lacking_knobs", "preflight"]

# Speculative-config keys each method of the space writes (SpeculativeSpec.config()).
_METHOD_FIELDS: dict[str, tuple[str, ...]] = {
    "ngram": ("method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"),
    "mtp": ("method", "num_speculative_tokens"),
    "suffix": ("method", "num_speculative_tokens"),
    "eagle": ("method", "num_speculative_tokens", "model"),
    "eagle3": ("method", "num_speculative_tokens", "model"),
    "draft_model": ("method", "num_speculative_tokens", "model"),
}
# Every knob tuner can emit, so `vllm_lacks` is the same whatever the preset searches.
_ALL_SPEC_FIELDS = ("disable_eagle_block_drop", "prompt_lookup_min", "prompt_lookup_max", "model")


@dataclass(frozen=True)
class StartCheck:
    """What `preflight` learned, to be written into the study once it is open."""

    capabilities: VllmCapabilities | None
    lacks: tuple[str, ...]

    def record(self, study: optuna.Study) -> None:
        """Store the vLLM version and lacking knobs; refuse a study run with another version.

        Raises:
            StudyError: the study was measured with a different vLLM version.
        """
        if self.capabilities is None:
            return
        version = self.capabilities.version
        stored = study.user_attrs.get(StudyAttr.VLLM_VERSION)
        if stored is not None and stored != version:
            raise StudyError(
                f"study {study.study_name!r} was measured with vLLM {stored} and this vLLM is "
                f"{version}: scores are not comparable; use a new --study name"
            )
        if stored is None:
            study.set_user_attr(StudyAttr.VLLM_VERSION, version)
            study.set_user_attr(StudyAttr.VLLM_LACKS, list(self.lacks))


def _flag(arg: str) -> str:
    return arg.split("=", 1)[0]


def lacking_knobs(caps: VllmCapabilities) -> tuple[str, ...]:
    """Methods and speculative-config keys tuner can emit that this vLLM does not accept."""
    lacks = [f for f in _ALL_SPEC_FIELDS if f not in caps.spec_fields]
    if caps.methods:
        lacks += [f"method {m}" for m in _METHOD_FIELDS if m not in caps.methods]
    return tuple(lacks)


def _fixed_flags(preset: Preset) -> list[tuple[str, str]]:
    """(flag, where it comes from) for everything a trial's server always gets."""
    m, s = preset.model, preset.space
    flags = [
        ("--max-model-len", "model.max_model_len"),
        ("--served-model-name", "model.served_name"),
        ("--max-num-seqs", "space.max_num_seqs"),
        ("--enable-prompt-tokens-details", "tuner's cached-token counts"),
        (
            "--enable-prefix-caching" if m.enable_prefix_caching else "--no-enable-prefix-caching",
            "model.enable_prefix_caching",
        ),
    ]
    if s.gpu_memory_utilization is not None:
        flags.append(("--gpu-memory-utilization", "space.gpu_memory_utilization"))
    if s.kv_cache_memory_bytes is not None:
        flags.append(("--kv-cache-memory-bytes", "space.kv_cache_memory_bytes"))
    if m.tool_call_parser:
        flags.append(("--enable-auto-tool-choice", "model.tool_call_parser"))
        flags.append(("--tool-call-parser", "model.tool_call_parser"))
    if m.load_format:
        flags.append(("--load-format", "model.load_format"))
    if preset.gpu.tensor_parallel_size != 1:
        flags.append(("--tensor-parallel-size", "gpu.tensor_parallel_size"))
    flags += [(_flag(a), "model.server_args") for a in m.server_args if a.startswith("-")]
    return flags


def _raw_spec_keys(preset: Preset) -> list[str]:
    # A `--speculative-config JSON` passed through server_args bypasses SpeculativeSpec.
    args = list(preset.model.server_args)
    keys: list[str] = []
    for i, arg in enumerate(args):
        text = None
        if arg.startswith("--speculative-config="):
            text = arg.split("=", 1)[1]
        elif arg == "--speculative-config" and i + 1 < len(args):
            text = args[i + 1]
        if text is not None:
            try:
                keys += list(json.loads(text))
            except (ValueError, TypeError):
                continue
    return keys


def _adjust(  # noqa: C901 (one step per knob the space may hold, suffix's included)
    preset: Preset, caps: VllmCapabilities, say: Callable[[str], None]
) -> tuple[Preset, list[str]]:
    """The preset without the searched knobs `caps` lacks, and the fixed ones it refuses."""
    v = f"vLLM {caps.version}"
    refused: list[str] = []
    space_update: dict[str, Any] = {}
    methods = list(preset.space.methods)
    for method in preset.space.methods_if_available:
        if caps.can_run(method):
            methods.append(method)
            say(f"{v} can run speculative method {method!r}: searched")
        elif caps.methods and method not in caps.methods:
            say(f"{v} has no speculative method {method!r}: not searched")
        else:  # suffix without arctic-inference
            say(
                f"{v} cannot run method {method!r}: arctic-inference does not import in "
                f"{caps.python} (scripts/install.sh builds it); not searched"
            )
    if preset.space.methods_if_available:
        # The stored preset is the space actually searched.
        space_update["methods_if_available"] = ()
    for method in list(methods):
        if method == "none":
            continue
        missing = [f for f in _METHOD_FIELDS.get(method, ()) if f not in caps.spec_fields]
        if caps.methods and method not in caps.methods:
            say(f"{v} has no speculative method {method!r}: left out of the search")
        elif missing:
            say(f"{v}'s speculative config lacks {missing}: method {method!r} left out")
        else:
            continue
        methods.remove(method)
    if methods != list(preset.space.methods):
        space_update["methods"] = tuple(methods)
    if "suffix" in methods and not caps.suffix_decoding:
        refused.append("method suffix (space.methods; arctic-inference does not import there)")
    if (
        preset.space.search_disable_eagle_block_drop
        and "disable_eagle_block_drop" not in caps.spec_fields
    ):
        say(f"{v} has no speculative_config.disable_eagle_block_drop: not searched")
        space_update["search_disable_eagle_block_drop"] = False
    if caps.flags is None:
        say(f"{v}'s server flags could not be read: flags not checked")
    else:
        fixed = _fixed_flags(preset)
        if any(m != "none" for m in methods):
            fixed.append(("--speculative-config", "space.methods"))
        seen: set[str] = set()
        for flag, where in fixed:
            if flag not in caps.flags and flag not in seen:
                seen.add(flag)
                refused.append(f"{flag} ({where})")
    refused += [
        f"speculative_config.{k} (model.server_args)"
        for k in _raw_spec_keys(preset)
        if k not in caps.spec_fields
    ]
    if space_update:
        preset = preset.model_copy(update={"space": preset.space.model_copy(update=space_update)})
    return preset, refused


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def preflight(
    preset: Preset,
    *,
    cache_dir: Path,
    say: Callable[[str], None] = _stderr,
    capabilities: VllmCapabilities | None = None,
    study_scored_s: float | None = None,
) -> tuple[Preset, StartCheck]:
    """Fit `preset` to the installed vLLM and check its workload size; see the module doc.

    Args:
        preset: The preset as loaded.
        cache_dir: tuner's cache (the probe's answer is kept there per vLLM install).
        say: Where the one-line notes go (stderr).
        capabilities: Use these instead of probing `TUNER_VLLM_COMMAND` (tests, callers that
            probed already).
        study_scored_s: The shortest scored window the study's trials measured, for runs of
            queued extras on a measured study (`check_sizing`).

    Raises:
        ConfigError: a fixed part of the preset needs a flag or key this vLLM lacks, the
            vLLM cannot be asked, or a GPU workload is too short to measure.
    """
    caps = capabilities or read_launch_capabilities(
        get_settings().launch_command(), cache_dir=cache_dir
    )
    if caps is None:
        # tuner's fake server measures nothing real: neither knobs nor window size apply.
        say("TUNER_VLLM_COMMAND does not start vLLM (a fake server?): knobs not checked")
        if preset.space.methods_if_available:
            # Nothing to ask whether they run: the space stays the file's `methods`.
            say(f"methods {list(preset.space.methods_if_available)} not searched: no vLLM to ask")
            space = preset.space.model_copy(update={"methods_if_available": ()})
            preset = preset.model_copy(update={"space": space})
        return preset, StartCheck(None, ())
    if not preset.gpu.cpu:
        check_sizing(
            preset.workload, where=f"preset {preset.study_name}", study_scored_s=study_scored_s
        )
    adjusted, refused = _adjust(preset, caps, say)
    if refused:
        raise ConfigError(
            f"vLLM {caps.version} (at {caps.python}) does not accept {', '.join(refused)}; "
            "change the preset or install a vLLM that has them"
        )
    return adjusted, StartCheck(caps, lacking_knobs(caps))
