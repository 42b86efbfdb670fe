#!/usr/bin/env bash
# The `svd` job benchmark, run on the GPU machine from the GPU bundle (scripts/gpu-bundle.sh):
# writes the standard workloads (svd-workload --standard), then per workload times the whole `svd`
# command on the GPU three times with PNG outputs and once without (--no-images), once on the CPU,
# and the Python peers (scripts/svd_peers.py) on the same files. `default` is the command with no
# input (the 512² phantom, ranks 1–100); its peers read the phantom's PNG. Results: LOG_DIR/*.json, *.log.
# Usage: gpu-bundle/svd-job-bench.sh LOG_DIR  (WORKLOADS="default w256:50 …", PEERS="numpy,…" or
# "none", and CPU=0 to skip the CPU engine narrow it)
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs=${1:?usage: svd-job-bench.sh LOG_DIR}
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
svd=$bundle/bin/svd

now_ms() { date +%s%3N; }
"$bundle/bin/svd-workload" "$work/wl" --standard
for w in ${WORKLOADS:-default w256:50 w512:20 w1024:50 noise1024:50 w2048:50 w2048:256 w4096:100 w4096:256}; do
  name=${w%%:*} k=${w##*:}
  inputs=("$work/wl/$name") ranks=(--ranks "$k") label=$name-k$k
  if [ "$name" = default ]; then inputs=() ranks=() k=1,5,10,20,50,100 label=default; fi
  echo "== $label"
  # The single 4096² image runs once, and only the GPU peers run on it (LAPACK's 4096² SVD takes a
  # minute).
  runs="1 2 3" peers=${PEERS:-numpy,cupy,torch-batched,torch-lowrank} peer_runs=3
  if [ "$name" = w4096 ]; then runs=1 peers=${PEERS:-cupy,torch-batched,torch-lowrank} peer_runs=1; fi
  for run in $runs; do
    t0=$(now_ms)
    timeout 120 "$svd" "${inputs[@]}" "${ranks[@]}" --device gpu --out-dir "$work/out-$label" \
      --json "$logs/$label-gpu-$run.json" >"$logs/$label-gpu-$run.log" 2>&1 || echo "  FAILED: see $label-gpu-$run.log"
    echo "  svd --device gpu (PNGs written), run $run: whole command $(($(now_ms) - t0)) ms (outside)"
    grep -E "^job:|^stages" "$logs/$label-gpu-$run.log" | sed 's/^/    /'
  done
  if [ "$name" != w4096 ]; then
    "$svd" "${inputs[@]}" "${ranks[@]}" --device gpu --no-images --out-dir "$work/out-$label" \
      --json "$logs/$label-gpu-noimg.json" >"$logs/$label-gpu-noimg.log" 2>&1
    echo "  svd --device gpu --no-images:"; grep -E "^job:" "$logs/$label-gpu-noimg.log" | sed 's/^/    /'
    if [ "${CPU:-1}" != 0 ]; then
      "$svd" "${inputs[@]}" "${ranks[@]}" --device cpu --no-images --out-dir "$work/out-$label" \
        --json "$logs/$label-cpu.json" >"$logs/$label-cpu.log" 2>&1
      echo "  svd --device cpu --no-images:"; grep -E "^job:" "$logs/$label-cpu.log" | sed 's/^/    /'
    fi
  fi
  [ "$peers" = none ] && continue
  python3 "$bundle/svd_peers.py" "$work/wl/$name" --k "$k" --runs "$peer_runs" --peers "$peers" \
    --json "$logs/$label-peers.json" 2>&1 | tee "$logs/$label-peers.log" | sed 's/^/  /'
done
