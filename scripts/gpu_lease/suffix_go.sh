#!/usr/bin/env bash
# Issue 47 on one GPU lease: the kit's last part in, then scripts/gpu_lease/suffix_check.sh
# detached from a copy of the tree, polled; its folder copied to $OUT (sc.tgz) every 30 s.
#
# Before it, calls that each carry one piece (the device takes at most 64 MiB a call):
#   mkdir -p /tmp/gpu-kit-parts && cp .kit/part-N/* /tmp/gpu-kit-parts/    (all but the last)
#   mkdir -p /tmp/arctic /tmp/models && cp .gpu/arctic/* /tmp/arctic/ && cp -r .gpu/model/* /tmp/models/
#     (the sdist and its build wheels; `tuner models prepare smollm2-135m` without its weights
#     and `tuner models prepare tiny-hybrid-mtp`)
# (or, where the device time is short, three calls: the kit re-split into parts of 59,000,000
# bytes, the last carrying .gpu/arctic/prebuilt (scripts/gpu_lease/arctic_wheel.sh) and
# .gpu/model/smollm2-135m beside it: no build on the machine, no hybrid serve)
# then, carrying the last kit part and .gpu/tools (the kit's env.sh):
#   bash scripts/gpu_lease/suffix_go.sh [SECONDS]
# and, while it runs, `bash scripts/gpu_lease/suffix_go.sh poll [SECONDS]` until DONE.
set -u
if [ "${1:-}" = poll ]; then
  LIMIT=${2:-540}
else
  LIMIT=${1:-480}
  bash scripts/gpu_lease/install_kit.sh .kit || exit 1
  rm -rf /tmp/sc-tree /tmp/sc && mkdir -p /tmp/sc-tree
  tar -C "$(pwd)" --exclude=./.kit -cf - . | tar -C /tmp/sc-tree -xf -
  (
    cd /tmp/sc-tree || exit 1
    # shellcheck disable=SC1091
    source .gpu/tools/env.sh
    # An earlier call's /tmp/arctic and /tmp/models, else what this call carried in .gpu.
    arctic=/tmp/arctic; [ -d "$arctic" ] || arctic=/tmp/sc-tree/.gpu/arctic
    models=/tmp/models; [ -d "$models" ] || models=/tmp/sc-tree/.gpu/model
    hybrid=$models/tiny-hybrid-mtp; [ -d "$hybrid" ] || hybrid=""
    setsid nohup bash scripts/gpu_lease/suffix_check.sh /tmp/sc "$arctic" \
      "$models/smollm2-135m" $hybrid > /tmp/sc.log 2>&1 &
  )
fi
t0=$(date +%s)
while :; do
  el=$(( $(date +%s) - t0 ))
  echo "--- poll +${el}s $(date -u +%T) gpu $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null)"
  tail -n 3 /tmp/sc/summary.txt 2>/dev/null | cut -c1-400
  tar -czf "$OUT/sc.tgz" -C /tmp sc sc.log 2>/dev/null
  grep -q '^DONE' /tmp/sc/summary.txt 2>/dev/null && { echo DONE; break; }
  [ "$el" -ge "$LIMIT" ] && break
  sleep 30
done
cat /tmp/sc/summary.txt 2>/dev/null
