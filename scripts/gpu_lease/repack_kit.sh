#!/usr/bin/env bash
# Repack a gpu-kit (build.sh's OUT: part-N/site.tar.xz.NN) into three parts that each fit one
# device call beside the tree (56 MiB), leaving out what tuner never loads: ray's Java jars and
# the JavaScript source maps (201 MB -> 172 MB compressed on 2026-12-06).
#   scripts/gpu_lease/repack_kit.sh KIT_DIR NEW_DIR [PART_SIZE=56M]
# PART_SIZE is split's -b: 59000000 leaves room for the suffix check's third call (README).
set -euo pipefail
KIT=${1:?usage: repack_kit.sh KIT_DIR NEW_DIR}; NEW=${2:?usage: repack_kit.sh KIT_DIR NEW_DIR}
SIZE=${3:-56M}
W=$(mktemp -d /tmp/kitrepack.XXXX); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/site" "$NEW/split"
cat $(ls "$KIT"/part-*/site.tar.xz.* | sort) | xz -dc -T0 | tar -x -C "$W/site"
rm -rf "$W/site/ray/jars"; find "$W/site" -name '*.js.map' -delete
tar -C "$W/site" --sort=name --owner=0 --group=0 -cf - . | xz -9 -T0 > "$W/site.tar.xz"
split -b "$SIZE" -d -a 2 "$W/site.tar.xz" "$NEW/split/site.tar.xz."
(cd "$W" && sha256sum site.tar.xz) > "$NEW/SHA256SUMS"
n=0; for p in "$NEW"/split/*; do mkdir -p "$NEW/part-$n"; mv "$p" "$NEW/part-$n/"; n=$((n+1)); done
rmdir "$NEW/split"; cp "$NEW/SHA256SUMS" "$NEW/part-0/"; echo "$n" > "$NEW/part-0/PARTS"
du -sh "$NEW"/part-*
