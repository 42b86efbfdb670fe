#!/usr/bin/env bash
# Where the `svd` job's host time goes on a large folder, on one GPU (issue 32's one-GPU part): 512
# images of 1024² at k = 50 with PNG outputs (twice), without outputs (--no-images), with
# --profile (host-side driver calls: allocations, synchronisations, copies), and as two processes
# sharing the GPU (--shard 0/2 and 1/2 at once: does a second engine find the GPU idle?). Run from
# the GPU bundle (scripts/gpu-bundle.sh). Logs and --json reports: LOG_DIR.
# Usage: gpu-bundle/svd-host-bench.sh LOG_DIR [COUNT]
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs=${1:?usage: svd-host-bench.sh LOG_DIR [COUNT]}
count=${2:-512}
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
svd=$bundle/bin/svd
now_ms() { date +%s%3N; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
echo "cores: $(nproc)"
t0=$(now_ms)
"$bundle/bin/svd-workload" "$work/w" --count "$count" --size 1024 >/dev/null
echo "workload: $count × 1024² PNGs written in $(($(now_ms) - t0)) ms"
job() { # label, svd arguments…
  local label=$1; shift
  t0=$(now_ms)
  "$svd" "$work/w" --ranks 50 --device gpu --out-dir "$work/out-$label" --json "$logs/$label.json" "$@" \
    >"$logs/$label.log" 2>&1
  echo "$label (rc $?, outside $(($(now_ms) - t0)) ms): $(grep -E '^job:' "$logs/$label.log")"
  grep -E '^stages|^peak' "$logs/$label.log" | sed 's/^/    /'
}
job png-1
job png-2
job noimg --no-images
job profile --profile
sed -n '/GPU activities\|API calls\|host/,$p' "$logs/profile.log" | head -60
t0=$(now_ms)
for s in 0 1; do
  "$svd" "$work/w" --ranks 50 --device gpu --shard "$s/2" --out-dir "$work/out-shard" \
    --json "$logs/shard-$s.json" >"$logs/shard-$s.log" 2>&1 &
done
wait
echo "two processes on one GPU (--shard 0/2 and 1/2 at once): $(($(now_ms) - t0)) ms outside"
grep -h -E '^job:' "$logs"/shard-*.log | sed 's/^/    /'
