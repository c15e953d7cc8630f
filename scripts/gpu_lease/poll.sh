#!/usr/bin/env bash
# Poll the detached study for up to $1 seconds (or until it is done); copy its files to $OUT.
set -u
LIMIT=${1:-500}; t0=$(date +%s)
snap() {
  tar -czf "$OUT/gs.tgz" -C /tmp gs tcache/logs gs.log gs-started compileall.log 2>/dev/null
  cp /tmp/gs/timing.txt "$OUT/" 2>/dev/null
}
while :; do
  el=$(( $(date +%s) - t0 ))
  echo "--- poll +${el}s $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) gpu $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null)"
  tail -n 2 /tmp/gs/optimize-console.txt 2>/dev/null | cut -c1-220
  tail -n 1 /tmp/gs/explain-console.txt 2>/dev/null | cut -c1-220
  tail -n 1 /tmp/gs/timing.txt 2>/dev/null
  snap
  grep -q '^done' /tmp/gs/timing.txt 2>/dev/null && { echo DONE; break; }
  [ "$el" -ge "$LIMIT" ] && break
  sleep 30
done
pgrep -f compileall >/dev/null && echo "compileall still running" || echo "compileall: $(cat /tmp/compileall.log 2>/dev/null | tail -2)"
snap; cat /tmp/gs/timing.txt 2>/dev/null
