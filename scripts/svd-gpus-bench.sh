#!/usr/bin/env bash
# `svd --gpus all` against one GPU, run on a machine with several GPUs from the GPU bundle
# (scripts/gpu-bundle.sh): the standard 8 × 2048² workload and 512 images of 1024², two runs each,
# then the two reports compared image by image. Logs: LOG_DIR/*.log.
# Usage: gpu-bundle/svd-gpus-bench.sh LOG_DIR
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs=${1:?usage: svd-gpus-bench.sh LOG_DIR}
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
"$bundle/bin/svd-workload" "$work/wl" --standard >/dev/null
"$bundle/bin/svd-workload" "$work/w512" --count 512 --size 1024 >/dev/null
for dir in "$work/wl/w2048" "$work/w512"; do
  name=$(basename "$dir")
  for gpus in one all; do
    flag="--gpu 0"; [ $gpus = all ] && flag="--gpus all"
    for run in 1 2; do
      # shellcheck disable=SC2086
      "$bundle/bin/svd" "$dir" --ranks 50 --device gpu $flag --out-dir "$work/out-$name-$gpus-$run" \
        >"$logs/$name-$gpus-$run.log" 2>&1
      echo "$name $flag run $run (rc $?): $(grep -E '^job:' "$logs/$name-$gpus-$run.log")"
    done
  done
  python3 - "$work/out-$name-one-1/report.csv" "$work/out-$name-all-1/report.csv" <<'PY'
import csv, sys
one, two = ({r["name"]: float(r["relative_error"]) for r in csv.DictReader(open(p))} for p in sys.argv[1:])
worst = max(abs(one[n] - two[n]) / max(one[n], 1e-300) for n in one)
print(f"  {len(one)} images on one GPU, {len(two)} on all; same names: {set(one) == set(two)}; "
      f"largest relative difference of the errors {worst:.2e}")
PY
done
