#!/usr/bin/env bash
# Build arctic-inference 0.3.0 for the GPU kit's Python 3.12 here, off the GPU machine, into
# DIR/prebuilt, beside the sdist and build wheels that suffix_check.sh builds from on the machine
# (it installs this wheel only where its own build fails).
#
#   scripts/gpu_lease/arctic_wheel.sh DIR [PYTHON3.12]
#
# The only extension it builds is the suffix tree (csrc/suffix_decoding: C++20 and nanobind, no
# torch, no CUDA); setup.py imports torch for one CMake path that extension never reads, so the
# build runs with a stand-in `torch` module (two lines, on PYTHONPATH for the build only) instead
# of a 1 GB CUDA torch. CMake is told the target Python (else it takes the first python3 on PATH
# and the wheel holds an extension for the wrong version). Needs a C++20 compiler and cmake.
set -euo pipefail
DIR=${1:?usage: arctic_wheel.sh DIR [PYTHON3.12]}
PY=${2:-python3.12}
SDIST="$DIR/arctic_inference-0.3.0.tar.gz"
[ -f "$SDIST" ] || { echo "arctic_wheel.sh: no $SDIST; pip download it first" >&2; exit 2; }
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' ||
  { echo "arctic_wheel.sh: $PY is not Python 3.12 (the GPU kit's)" >&2; exit 2; }
W=$(mktemp -d /tmp/arctic-wheel.XXXX); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/deps" "$W/stand-in/torch/utils" "$DIR/prebuilt"
"$PY" -m pip install -q --target "$W/deps" nanobind==2.9.2 protobuf==5.29.6 grpcio-tools ninja \
  setuptools wheel
printf 'from . import utils\n' > "$W/stand-in/torch/__init__.py"
printf 'cmake_prefix_path = "/nonexistent"  # read by setup.py, unused by the suffix tree\n' \
  > "$W/stand-in/torch/utils/__init__.py"
CMAKE_ARGS="-DPython_EXECUTABLE=$("$PY" -c 'import sys; print(sys.executable)')" \
  PATH="$W/deps/bin:$PATH" PYTHONPATH="$W/deps:$W/stand-in" \
  "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DIR/prebuilt" "$SDIST"
whl=$(ls "$DIR"/prebuilt/arctic_inference-0.3.0-cp312-*.whl)
"$PY" -c 'import sys, zipfile
names = [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(".so")]
assert names and all("cpython-312" in n for n in names), names
print(sys.argv[1], names)' "$whl"
