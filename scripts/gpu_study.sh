#!/usr/bin/env bash
# The qwen3.8-27b-shape rehearsal on one GPU, start to finish, as one command (issue 46):
# optimize (no speculation, n-gram depth 1, MTP depth 1), export and report (beside explain, on the
# CPU), `tuner explain` on the MTP trial (the baseline with its cache cut to MTP's), then
# scripts/gpu_study_summary.py; then the baseline's warm start against the study's compile cache.
#
#   scripts/gpu_study.sh OUT_DIR [MODEL_DIR]
#
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
DB="$OUT/qwen3.8-27b-shape-h200.db"
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
tuner optimize --model qwen3.8-27b-shape --gpu h200 --n-trials 3 --confirm 0 \
  --storage "$STORAGE" > "$OUT/optimize-console.txt" 2>&1
echo "optimize exit $?" >> "$OUT/optimize-console.txt"
mark optimize
listing cache-after-optimize.txt
# Export and report need no GPU: they run beside explain's control instead of before it.
( tuner export --storage "$STORAGE" > "$OUT/export.txt" 2>&1
  tuner report --storage "$STORAGE" --out "$OUT/report" > "$OUT/report-console.txt" 2>&1
  mark export_report ) &
REPORTS=$!
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
EXPLAIN=()
[ -s "$OUT/explain.json" ] && EXPLAIN=(--explain "$OUT/explain.json")
NOTE="scripts/gpu_study.sh on one H200 ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)), $(date -u +%Y-%m-%d)"
summarise() {
  "$PY" "$ROOT/scripts/gpu_study_summary.py" --storage "$STORAGE" --logs "$TUNER_CACHE_DIR/logs" \
    "${EXPLAIN[@]}" "$@" --out "$OUT/summary.json" --note "$NOTE" > "$OUT/summary-console.txt" 2>&1
}
summarise
mark summary
# The study ends here. Then a warm start: the baseline once more against the compile cache the
# study filled, beside trial 0's first start (issue 46: warm at most half of cold).
TUNER_TEST_CACHE=$TUNER_CACHE_DIR "$PY" "$ROOT/benchmarks/compile_cache_ab.py" \
  --model qwen3.8-27b-shape --gpu h200 --warm-cache "$TUNER_CACHE_DIR" --cold-storage "$STORAGE" \
  --out "$OUT/warm-start.json" > "$OUT/warm-start-console.txt" 2>&1
echo "warm start exit $?" >> "$OUT/warm-start-console.txt"
mark warm_start
listing cache-after-warm-start.txt
[ -s "$OUT/warm-start.json" ] && summarise --warm-start "$OUT/warm-start.json"
echo "done" >> "$TIMES"
