#!/usr/bin/env bash
# The histogram, reduce, scan and transpose benchmarks with their CuPy/PyTorch peers and the device's copy
# bandwidth, in one run on one GPU: scripts/primitives-bench.sh in the repository (through
# `cargo bench`), gpu-bundle/primitives-bench.sh in the GPU bundle (its benches/ beside it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -d "$here/benches" ]; then
  bench() { "$here/benches/$1"; }
else
  bench() { (cd "$here/.." && cargo bench --bench "$1"); }
fi
date -u +%Y-%m-%dT%H:%M:%SZ
for name in histogram reduce scan transpose; do
  echo "== $name"
  bench "$name"
done
echo "== peers"
python3 "$here/primitives_peers.py"
