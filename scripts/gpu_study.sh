#!/usr/bin/env bash
# The qwen3.8-27b-shape rehearsal on one GPU, start to finish, as one command (issue 46):
# optimize (no speculation, n-gram depth 1, MTP depth 1), export and report (on the CPU, beside
# the next server), the baseline's warm start against the study's compile cache, `tuner explain`
# on the MTP trial (the baseline with its cache cut to MTP's), scripts/gpu_study_summary.py.
#
#   scripts/gpu_study.sh OUT_DIR [MODEL_DIR]
#
# The GPU preset follows the card (nvidia-smi's name): h100 on an H100, else h200; TUNER_GPU
# names another.
# OUT_DIR gets the study's SQLite file, the consoles, explain's JSON, the summary and
# timing.txt (seconds from this script's start to each step's end). MODEL_DIR: a
# `tuner models prepare qwen3.8-27b-shape` output (config and tokenizer, no weights) to copy
# into the cache, for a machine that cannot build it. Runs tuner from wherever this script is
# (PYTHONPATH), so a copy of the tree that nothing replaces while it runs is the place to start it.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: gpu_study.sh OUT_DIR [MODEL_DIR]}
MODEL_SRC=${2:-}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-/tmp/tcache}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 COLUMNS=160
PY=${PYTHON:-python3}
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
  *H100*) CARD=h100 ;;
  *) CARD=h200 ;;
esac
GPU=${TUNER_GPU:-$CARD}
DB="$OUT/qwen3.8-27b-shape-$GPU.db"
STORAGE="sqlite:///$DB"
T0=$(date +%s)
TIMES="$OUT/timing.txt"
: > "$TIMES"
mark() { echo "$1 $(( $(date +%s) - T0 ))" >> "$TIMES"; echo "[$(( $(date +%s) - T0 )) s] $1"; }
tuner() { "$PY" -m tuner.cli "$@"; }
# Every file of the compile cache (mtime, bytes, hard links, path): which kernels a start wrote.
listing() { find "$TUNER_CACHE_DIR/vllm" -type f -printf '%T@ %s %n %P\n' 2>/dev/null | sort > "$OUT/$1"; }

if [ -n "$MODEL_SRC" ]; then
  mkdir -p "$TUNER_CACHE_DIR/models"
  cp -r "$MODEL_SRC" "$TUNER_CACHE_DIR/models/"
fi
mark start
echo "epoch $T0" >> "$TIMES"
tuner optimize --model qwen3.8-27b-shape --gpu "$GPU" --n-trials 3 --confirm 0 \
  --storage "$STORAGE" > "$OUT/optimize-console.txt" 2>&1
echo "optimize exit $?" >> "$OUT/optimize-console.txt"
mark optimize
listing cache-after-optimize.txt
# Export and report need no GPU: they run beside the next server instead of before it.
( tuner export --storage "$STORAGE" > "$OUT/export.txt" 2>&1
  tuner report --storage "$STORAGE" --out "$OUT/report" > "$OUT/report-console.txt" 2>&1
  mark export_report ) &
REPORTS=$!
NOTE="scripts/gpu_study.sh, preset $GPU, on one GPU ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)), $(date -u +%Y-%m-%d)"
EXTRA=()
summarise() {
  "$PY" "$ROOT/scripts/gpu_study_summary.py" --storage "$STORAGE" --logs "$TUNER_CACHE_DIR/logs" \
    "${EXTRA[@]}" --out "$OUT/summary.json" --note "$NOTE" > "$OUT/summary-console.txt" 2>&1
}
# A warm start, before explain (it is the shorter, and a lease cut short keeps it): the
# baseline once more against the compile cache the search filled, beside trial 0's first start
# (issue 46: warm at most half of cold). GPU_STUDY_WARM_START=0 leaves it out (explain's
# control, the baseline with its cache cut, is then the one repeat of a compiled config).
if [ "${GPU_STUDY_WARM_START:-1}" != 0 ]; then
  TUNER_TEST_CACHE=$TUNER_CACHE_DIR "$PY" -m benchmarks.compile_cache_ab \
    --model qwen3.8-27b-shape --gpu "$GPU" --warm-cache "$TUNER_CACHE_DIR" \
    --cold-storage "$STORAGE" --out "$OUT/warm-start.json" > "$OUT/warm-start-console.txt" 2>&1
  echo "warm start exit $?" >> "$OUT/warm-start-console.txt"
  mark warm_start
  listing cache-after-warm-start.txt
  [ -s "$OUT/warm-start.json" ] && EXTRA+=(--warm-start "$OUT/warm-start.json")
  summarise
  mark summary_without_explain
fi
MTP=$("$PY" - "$STORAGE" <<'EOF'
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
url = sys.argv[1]
study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
done = [t for t in study.trials if t.state.name == "COMPLETE" and t.params.get("method") == "mtp"]
print(done[0].number if done else "")
EOF
)
if [ -n "$MTP" ]; then
  tuner explain --storage "$STORAGE" --trial "$MTP" --json > "$OUT/explain.json" \
    2> "$OUT/explain-console.txt"
  echo "explain exit $?" >> "$OUT/explain-console.txt"
else
  echo "no completed MTP trial: explain not run" > "$OUT/explain-console.txt"
fi
mark explain
listing cache-after-explain.txt
# When the vLLM capabilities probe (the first start's preamble) wrote its answer.
find "$TUNER_CACHE_DIR/vllm-capabilities" -type f -printf '%T@ %P\n' > "$OUT/probe-written.txt" 2>/dev/null
wait "$REPORTS"
tuner cache show > "$OUT/cache.txt" 2>&1
[ -s "$OUT/explain.json" ] && EXTRA+=(--explain "$OUT/explain.json")
summarise
mark summary
echo "done" >> "$TIMES"
