#!/usr/bin/env bash
# Last kit part: install, start scripts/gpu_study.sh detached from a copy of the tree, poll.
set -u
ROOT=$(pwd)
bash scripts/gpu_lease/install_kit.sh .kit || exit 1
source .gpu/tools/env.sh  # the gpu-kit's env.sh, carried in .gpu/tools
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# pip --no-compile built the kit: byte-compile it beside the study's first start.
(setsid nohup python3 -m compileall -q -j 0 /tmp/site > /tmp/compileall.log 2>&1 &)
rm -rf /tmp/tree && mkdir -p /tmp/tree && tar -C "$ROOT" --exclude=./.kit -cf - . | tar -C /tmp/tree -xf -
date -u +%FT%TZ > /tmp/gs-started
(cd /tmp/tree && GPU_STUDY_WARM_START=${WARM:-1} setsid nohup bash scripts/gpu_study.sh /tmp/gs /tmp/tree/.gpu/model/qwen3.8-27b-shape > /tmp/gs.log 2>&1 &)
bash scripts/gpu_lease/poll.sh "${1:-480}"
