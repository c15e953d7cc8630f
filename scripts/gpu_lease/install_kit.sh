#!/usr/bin/env bash
# The gpu-kit's install.sh with one change for the lease's clock: xz decompresses on every core
# (the kit is multi-block) where `xz` exists, and no import check runs after it (go.sh
# byte-compiles the kit in the background instead).
set -uo pipefail
HERE=${1:-.}
mkdir -p /tmp/gpu-kit-parts
for d in "$HERE"/part-*; do [ -d "$d" ] && cp "$d"/* /tmp/gpu-kit-parts/; done
[ -f /tmp/site/.done ] && { echo "gpu-kit: already installed"; exit 0; }
cd /tmp/gpu-kit-parts
want=$(cat PARTS 2>/dev/null || echo '?'); have=$(ls site.tar.xz.* 2>/dev/null | wc -l)
[ "$want" = "$have" ] || { echo "gpu-kit: $have of $want parts here; bring the rest"; exit 3; }
t0=$(date +%s)
cat $(ls site.tar.xz.* | sort) > /tmp/site.tar.xz
(cd /tmp && sha256sum -c /tmp/gpu-kit-parts/SHA256SUMS) || { echo "gpu-kit: checksum mismatch"; exit 4; }
mkdir -p /tmp/site
if command -v xz >/dev/null; then
  xz -dc -T0 /tmp/site.tar.xz | tar -x -C /tmp/site || exit 5
else
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall('/tmp/site', filter='tar')" /tmp/site.tar.xz
fi
rm -f /tmp/site.tar.xz
printf '#!/bin/sh\nexport PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}\nexec %s -m vllm.entrypoints.cli.main "$@"\n' "$(command -v python3)" > /usr/local/bin/vllm
chmod +x /usr/local/bin/vllm && touch /tmp/site/.done
echo "gpu-kit: unpacked in $(( $(date +%s) - t0 )) s"
