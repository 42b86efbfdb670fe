#!/usr/bin/env bash
# The `svd` job benchmark, run on the GPU machine from the GPU bundle (scripts/gpu-bundle.sh):
# writes the standard workloads (svd-workload --standard), then per workload times the whole `svd`
# command on the GPU three times with PNG outputs and once without (--no-images), once on the CPU,
# and the Python peers (scripts/svd_peers.py) on the same files. Results: LOG_DIR/*.json, *.log.
# Usage: gpu-bundle/svd-job-bench.sh LOG_DIR  (WORKLOADS="w256:50 …" and PEERS="numpy,…" or "none" narrow it)
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs=${1:?usage: svd-job-bench.sh LOG_DIR}
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
svd=$bundle/bin/svd

now_ms() { date +%s%3N; }
"$bundle/bin/svd-workload" "$work/wl" --standard
for w in ${WORKLOADS:-w256:50 w1024:50 w2048:50 w4096:256}; do
  name=${w%%:*} k=${w##*:}
  dir=$work/wl/$name
  echo "== $name (k = $k)"
  # The single 4096² image runs once (its k = 256 subspace is the slow global-memory path), and
  # only the GPU peers run on it (LAPACK's 4096² SVD takes a minute).
  runs="1 2 3" peers=${PEERS:-numpy,cupy,torch-batched,torch-lowrank} peer_runs=3
  if [ "$name" = w4096 ]; then runs=1 peers=${PEERS:-cupy,torch-batched,torch-lowrank} peer_runs=1; fi
  for run in $runs; do
    t0=$(now_ms)
    timeout 120 "$svd" "$dir" --ranks "$k" --device gpu --out-dir "$work/out-$name" --json "$logs/$name-gpu-$run.json" \
      >"$logs/$name-gpu-$run.log" 2>&1 || echo "  FAILED: see $name-gpu-$run.log"
    echo "  svd --device gpu (PNGs written), run $run: whole command $(($(now_ms) - t0)) ms (outside)"
    grep -E "^job:|^stages" "$logs/$name-gpu-$run.log" | sed 's/^/    /'
  done
  if [ "$name" != w4096 ]; then
    "$svd" "$dir" --ranks "$k" --device gpu --no-images --out-dir "$work/out-$name" --json "$logs/$name-gpu-noimg.json" \
      >"$logs/$name-gpu-noimg.log" 2>&1
    echo "  svd --device gpu --no-images:"; grep -E "^job:" "$logs/$name-gpu-noimg.log" | sed 's/^/    /'
    "$svd" "$dir" --ranks "$k" --device cpu --no-images --out-dir "$work/out-$name" --json "$logs/$name-cpu.json" \
      >"$logs/$name-cpu.log" 2>&1
    echo "  svd --device cpu --no-images:"; grep -E "^job:" "$logs/$name-cpu.log" | sed 's/^/    /'
  fi
  [ "$peers" = none ] && continue
  python3 "$bundle/svd_peers.py" "$dir" --k "$k" --runs "$peer_runs" --peers "$peers" --json "$logs/$name-peers.json" 2>&1 | tee "$logs/$name-peers.log" | sed 's/^/  /'
done
