#!/usr/bin/env bash
# Two builds of the `svd` command on the same workloads, runs alternating in one call, on the GPU
# machine: whether a change made any workload slower. Writes the standard workloads (the bundle's
# svd-workload --standard), then per workload runs OLD and NEW in turn RUNS times (default 5) with
# PNGs written and prints each build's job times ("job: … ms after start-up") and their medians.
# Usage: gpu-bundle/svd-job-compare.sh OLD_SVD NEW_SVD LOG_DIR
#        (WORKLOADS="default w1024:50 …" and RUNS=N narrow it; default as svd-job-bench.sh)
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
old=${1:?usage: svd-job-compare.sh OLD_SVD NEW_SVD LOG_DIR}
new=${2:?usage: svd-job-compare.sh OLD_SVD NEW_SVD LOG_DIR}
logs=${3:?usage: svd-job-compare.sh OLD_SVD NEW_SVD LOG_DIR}
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bundle/bin/svd-workload" "$work/wl" --standard >/dev/null

# The job's own time after start-up, ms, from its summary line.
job_ms() { sed -n 's/^job: .* in \([0-9.]*\) ms after start-up.*/\1/p' "$1"; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "workload | old ms (median; runs) | new ms (median; runs) | new/old"
echo "---|---|---|---"
for w in ${WORKLOADS:-default w256:50 w512:20 w1024:50 noise1024:50 w2048:50 w2048:256 w4096:100 w4096:256}; do
  name=${w%%:*} k=${w##*:}
  inputs=("$work/wl/$name") ranks=(--ranks "$k") label=$name-k$k
  if [ "$name" = default ]; then inputs=() ranks=() label=default; fi
  declare -A times=([old]="" [new]="")
  for run in $(seq 1 "${RUNS:-5}"); do
    for which in old new; do
      bin=$old
      [ "$which" = new ] && bin=$new
      log="$logs/$label-$which-$run.log"
      timeout 300 "$bin" "${inputs[@]}" "${ranks[@]}" --device gpu --out-dir "$work/out-$which" >"$log" 2>&1 ||
        echo "  $label $which run $run FAILED: see $log" >&2
      times[$which]+="$(job_ms "$log") "
    done
  done
  o=$(tr ' ' '\n' <<<"${times[old]}" | grep . | median)
  n=$(tr ' ' '\n' <<<"${times[new]}" | grep . | median)
  printf '%s | %s (%s) | %s (%s) | %.2f\n' "$label" "$o" "${times[old]% }" "$n" "${times[new]% }" \
    "$(awk -v a="$n" -v b="$o" 'BEGIN {print (b > 0) ? a / b : 0}')"
done
