#!/usr/bin/env bash
# Build and install arctic-inference (vLLM's method "suffix": SuffixDecoding) into a Python.
#
#   scripts/install_arctic.sh [PYTHON]     (default: .venv/bin/python; install.sh calls it)
#
# arctic-inference 0.3.0 is published as an sdist only (CMake, nanobind); its build-system
# pins protobuf 5.29.6, which would downgrade the venv's, so the build requirements go into a
# throw-away folder on PYTHONPATH and the build runs without isolation against the venv's
# torch, with CMake told which Python it builds for (left to itself, CMake's FindPython takes the
# first python3 on PATH, and a venv of another version then gets an extension that does not
# import: seen with a 3.12 target on a 3.11 PATH). The wheel is kept in ~/.cache/tuner/wheels (TUNER_WHEEL_CACHE), so a second install
# only installs it. Idempotent: an importable `arctic_inference.suffix_decoding` of this
# version is left alone. A failed build is one line on stderr and exit 0: tuner then leaves
# "suffix" out of the search (its capability probe finds no arctic-inference) and everything
# else works. The package also registers a general vLLM plugin; it does nothing unless
# ARCTIC_INFERENCE_ENABLED=1, which tuner keeps out of a server's environment
# (docs/vllm-facts.md, "Suffix decoding").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
VERSION=0.3.0
WHEELS=${TUNER_WHEEL_CACHE:-$HOME/.cache/tuner/wheels}

if [ ! -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then
  echo "install_arctic.sh: $PY is not a Python; give the venv's python" >&2
  exit 2
fi
check="import importlib.metadata as m; assert m.version('arctic-inference') == '$VERSION'
from arctic_inference.suffix_decoding import SuffixDecodingCache"
if "$PY" -c "$check" >/dev/null 2>&1; then
  echo "arctic-inference $VERSION already installed (suffix decoding available)"
  exit 0
fi

mkdir -p "$WHEELS"
tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel=$(ls "$WHEELS"/arctic_inference-"$VERSION"-"$tag"-*.whl 2>/dev/null | head -n 1 || true)
log=$(mktemp -t tuner-arctic-build.XXXXXX.log)
# The telling line of a failed build: the first Python exception or CMake/compiler error.
why() { grep -m 1 -E "^ *[A-Za-z]*Error: |CMake Error|error: [^s]" "$log" | sed 's/^ *//' || tail -n 1 "$log"; }
if [ -z "$wheel" ]; then
  deps=$(mktemp -d -t tuner-arctic-deps.XXXXXX)
  trap 'rm -rf "$deps"' EXIT
  built=0
  {
    "$PY" -m pip install -q --target "$deps" nanobind==2.9.2 protobuf==5.29.6 grpcio-tools &&
      { command -v cmake >/dev/null 2>&1 || "$PY" -m pip install -q --target "$deps" cmake; } &&
      CMAKE_ARGS="-DPython_EXECUTABLE=$("$PY" -c 'import sys; print(sys.executable)')" \
      PATH="$deps/bin:$PATH" PYTHONPATH="$deps" "$PY" -m pip wheel -q --no-deps \
        --no-build-isolation --no-binary arctic-inference -w "$WHEELS" \
        "arctic-inference==$VERSION" &&
      built=1
  } >"$log" 2>&1 || true
  wheel=$(ls "$WHEELS"/arctic_inference-"$VERSION"-"$tag"-*.whl 2>/dev/null | head -n 1 || true)
  if [ "$built" != 1 ] || [ -z "$wheel" ]; then
    echo "arctic-inference $VERSION did not build here ($(why); full log $log):" \
      "suffix decoding will not be searched, everything else works" >&2
    exit 0
  fi
fi
if ! "$PY" -m pip install -q --no-deps "$wheel" >"$log" 2>&1 || ! "$PY" -c "$check" >>"$log" 2>&1; then
  echo "arctic-inference $VERSION from $wheel does not import here ($(why)):" \
    "suffix decoding will not be searched, everything else works" >&2
  exit 0
fi
rm -f "$log"
echo "arctic-inference $VERSION installed from $wheel (suffix decoding available)"
