#!/usr/bin/env bash
# Issue 47 on the GPU kit (vLLM 0.26, torch 2.11+cu130, Python 3.12, one GPU): does
# arctic-inference 0.3.0 build and import there, may its general vLLM plugin load, and does a
# `suffix` trial run through tuner's own trial path?
#
#   bash scripts/gpu_lease/suffix_check.sh OUT_DIR ARCTIC_DIR MODEL_DIR [HYBRID_DIR]
#
# ARCTIC_DIR holds the sdist arctic_inference-0.3.0.tar.gz and the wheels of its build
# requirements for Python 3.12 (nanobind 2.9.2, protobuf 5.29.6, grpcio-tools, grpcio, cmake,
# ninja, setuptools, wheel: `pip download --only-binary :all: --python-version 3.12 ...`), since
# the GPU machine has no package index. MODEL_DIR: `tuner models prepare smollm2-135m` output
# without its weights (the GPU presets serve dummy weights); HYBRID_DIR the same for
# tiny-hybrid-mtp. Run with the kit's env.sh sourced. Writes to OUT_DIR:
#   build.log, summary.txt (one line a step, the figures docs/vllm-facts.md quotes),
#   serve-*.log (vLLM's own log of each raw `vllm serve`), metrics-*.txt (its /metrics after
#   the requests), suffix-gpu.json and suffix-gpu.txt (scripts/gpu_lease/suffix_gpu.py).
set -u
OUT=${1:?usage: suffix_check.sh OUT_DIR ARCTIC_DIR MODEL_DIR [HYBRID_DIR]}
SRC=${2:?ARCTIC_DIR}
MODEL=${3:?MODEL_DIR}
HYBRID=${4:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
SUM="$OUT/summary.txt"
say() { echo "$*" | tee -a "$SUM"; }
PY=${PYTHON:-python3}
SITE=${KIT_SITE:-/tmp/site}

say "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $($PY -V 2>&1);" \
  "torch $($PY -c 'import torch; print(torch.__version__)' 2>&1 | tail -1); vllm $($PY -c 'import vllm; print(vllm.__version__)' 2>&1 | tail -1);" \
  "cmake on PATH: $(command -v cmake || echo none); g++: $(command -v g++ || echo none); nvcc: $(command -v nvcc || echo none)"

# 1. Build: the build requirements into a folder of their own (the kit keeps its protobuf),
# then pip wheel against the machine's torch, as scripts/install_arctic.sh does on the CPU.
DEPS=/tmp/arctic-deps
WHEELS=/tmp/arctic-wheel
rm -rf "$DEPS" "$WHEELS"; mkdir -p "$DEPS" "$WHEELS"
t0=$(date +%s)
if [ ! -f "$SRC/arctic_inference-0.3.0.tar.gz" ]; then
  echo "no sdist in $SRC: only the wheel built off the machine" > "$OUT/build.log"
  false
else
{
  $PY -m pip install -q --no-index --find-links "$SRC" --target "$DEPS" \
    nanobind==2.9.2 protobuf==5.29.6 grpcio-tools grpcio cmake ninja setuptools wheel &&
  CMAKE_ARGS="-DPython_EXECUTABLE=$($PY -c 'import sys; print(sys.executable)')" \
  PATH="$DEPS/bin:$PATH" PYTHONPATH="$DEPS:${PYTHONPATH:-}" $PY -m pip wheel -v --no-deps \
    --no-build-isolation --no-index -w "$WHEELS" "$SRC/arctic_inference-0.3.0.tar.gz"
} > "$OUT/build.log" 2>&1
fi
rc=$?
t1=$(date +%s)
wheel=$(ls "$WHEELS"/arctic_inference-0.3.0-*.whl 2>/dev/null | head -1)
say "build: exit $rc in $((t1 - t0)) s; wheel: ${wheel:-none}" \
  "$( [ -n "$wheel" ] && $PY -c 'import sys, zipfile; print(" ".join(f"{i.filename} ({i.file_size} bytes)" for i in zipfile.ZipFile(sys.argv[1]).infolist() if i.filename.endswith(".so")))' "$wheel")"
if [ -z "$wheel" ]; then
  say "build failed or not tried: $(grep -m1 -E 'Error|error:|no sdist' "$OUT/build.log")"
  # A cp312 wheel built off the machine (the suffix tree links no torch; setup.py imports torch
  # only for a CMake path that tree never reads): is the GPU build's only obstacle the machine?
  wheel=$(ls "$SRC"/prebuilt/arctic_inference-0.3.0-cp312-*.whl 2>/dev/null | head -1)
  [ -z "$wheel" ] && exit 1
  say "using the wheel built off the machine: $wheel"
fi
$PY -m pip install -q --no-deps --no-index --target "$SITE" "$wheel" >> "$OUT/build.log" 2>&1
say "import: $($PY -c 'from arctic_inference.suffix_decoding import SuffixDecodingCache; print("SuffixDecodingCache imports")' 2>&1 | tail -1)"
say "plugins: $($PY -c 'from importlib.metadata import entry_points; print([f"{e.name}={e.value}" for e in entry_points(group="vllm.general_plugins")])' 2>&1 | tail -1)"
say "tuner's probe: suffix_decoding_available() = $(cd "$ROOT" && $PY -c 'from tuner.server.knobs import suffix_decoding_available; print(suffix_decoding_available())' 2>&1 | tail -1)"

# HTTP without curl (the GPU image may lack it): GET prints the body, POST a JSON body.
get() { $PY -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1" 2>/dev/null; }
post() { $PY -c 'import sys, urllib.request; r = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={"Content-Type": "application/json"}); urllib.request.urlopen(r, timeout=120).read()' "$1" "$2" 2>/dev/null; }

# 2. Raw `vllm serve` with method suffix: the plugin loaded as installed, then switched on.
serve() {  # NAME MODEL_DIR TIMEOUT_S [ENV=VALUE ...]
  local name=$1 dir=$2 limit=$3; shift 3
  local port=8123 log="$OUT/serve-$name.log" start ready=""
  start=$(date +%s)
  env "$@" setsid vllm serve "$dir" --served-model-name m --host 127.0.0.1 --port $port \
    --load-format dummy --max-model-len 4096 --gpu-memory-utilization 0.3 --max-num-seqs 8 \
    --speculative-config '{"method": "suffix", "num_speculative_tokens": 4}' "${EXTRA_ARGS[@]}" \
    > "$log" 2>&1 &
  local pid=$!
  while [ $(( $(date +%s) - start )) -lt "$limit" ] && kill -0 $pid 2>/dev/null; do
    if get "http://127.0.0.1:$port/health" > /dev/null; then ready=$(( $(date +%s) - start )); break; fi
    sleep 2
  done
  if [ -n "$ready" ]; then
    local prompt='Repeat this tool output exactly, three times: {"order": 1234, "status": "shipped", "items": ["apple", "pear"]}'
    local n=0
    for i in 1 2 3 4; do
      post "http://127.0.0.1:$port/v1/chat/completions" \
        "{\"model\": \"m\", \"temperature\": 0, \"max_tokens\": 96, \"messages\": [{\"role\": \"user\", \"content\": $($PY -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$prompt")}]}" \
        && n=$((n + 1))
    done
    get "http://127.0.0.1:$port/metrics" > "$OUT/metrics-$name.txt"
    local drafted accepted
    drafted=$(grep -E '^vllm:spec_decode_num_draft_tokens_total' "$OUT/metrics-$name.txt" | awk '{s+=$2} END {print s+0}')
    accepted=$(grep -E '^vllm:spec_decode_num_accepted_tokens_total' "$OUT/metrics-$name.txt" | awk '{s+=$2} END {print s+0}')
    say "serve $name ($*): ready in ${ready} s; $n of 4 requests answered; drafted $drafted, accepted $accepted (dummy weights: acceptance means nothing)"
  else
    say "serve $name ($*): not ready in $(( $(date +%s) - start )) s; last error: $(grep -m1 -E 'Error|error|raise' "$log" | cut -c1-300)"
  fi
  kill -TERM -- -$pid 2>/dev/null; sleep 5; kill -KILL -- -$pid 2>/dev/null
  wait $pid 2>/dev/null
}
EXTRA_ARGS=()
serve plugin-as-installed "$MODEL" 300
serve plugin-enabled "$MODEL" 300 ARCTIC_INFERENCE_ENABLED=1
# A Gated DeltaNet hybrid (the kit has no FlashInfer: the preset's triton prefill backend).
EXTRA_ARGS=(--gdn-prefill-backend triton)
if [ -n "$HYBRID" ]; then serve hybrid "$HYBRID" 300; fi

# 3. Through tuner's trial path (evaluate(), as a study's worker): none, n-gram, suffix
# (SUFFIX_TRIALS=0 skips it where the lease's time is short).
if [ "${SUFFIX_TRIALS:-1}" != 0 ]; then
  (cd "$ROOT" && PYTHONPATH="$ROOT:${PYTHONPATH:-}" $PY scripts/gpu_lease/suffix_gpu.py \
    --model-dir "$MODEL" --out "$OUT" > "$OUT/suffix-gpu-console.txt" 2>&1)
  say "tuner trials: exit $? ($(tail -1 "$OUT/suffix-gpu-console.txt"))"
fi
say "DONE"
