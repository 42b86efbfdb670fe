#!/usr/bin/env bash
# `svd` on one GPU against two and all GPUs, run from the GPU bundle (scripts/gpu-bundle.sh) on a
# machine with several: the standard 8 × 2048² workload and 512 images of 1024², `--ranks 50`, with
# PNGs and with `--no-images`, three runs each (job time after start-up, and start-up), then one
# `--profile` run of each (each GPU's timeline and profile) and every report compared with
# one GPU's image by image. Logs: LOG_DIR/*.log; the summary on stdout.
# Usage: gpu-bundle/svd-gpus-bench.sh LOG_DIR [RUNS]
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs=${1:?usage: svd-gpus-bench.sh LOG_DIR [RUNS]}
runs=${2:-3}
mkdir -p "$logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "cores: $(nproc)"
"$bundle/bin/svd-workload" "$work/wl" --standard >/dev/null
"$bundle/bin/svd-workload" "$work/w512" --count 512 --size 1024 >/dev/null

gpu_flag() {
  case $1 in
    1) echo "--gpu 0" ;;
    all) echo "--gpus all" ;;
    *) seq -s, 0 $(($1 - 1)) | sed 's/^/--gpus /' ;;
  esac
}
counts="1"
[ "$count" -ge 2 ] && counts+=" 2"
[ "$count" -gt 2 ] && counts+=" all"

for dir in "$work/wl/w2048" "$work/w512"; do
  name=$(basename "$dir")
  for images in png none; do
    extra=""; [ $images = none ] && extra="--no-images"
    for gpus in $counts; do
      for run in $(seq "$runs"); do
        log="$logs/$name-$images-$gpus-$run.log"
        # shellcheck disable=SC2046,SC2086
        "$bundle/bin/svd" "$dir" --ranks 50 --device gpu $(gpu_flag $gpus) $extra \
          --out-dir "$work/out-$name-$images-$gpus-$run" >"$log" 2>&1
        echo "$name $images gpus=$gpus run $run (rc $?): $(grep -E '^job:' "$log" | sed 's/; whole command.*//')"
      done
      rm -rf "$work"/out-"$name"-"$images"-"$gpus"-[2-9]
    done
  done
  for gpus in $counts; do for images in png none; do
    extra=""; [ $images = none ] && extra="--no-images"
    p=$name-profile-$images-$gpus
    # shellcheck disable=SC2046,SC2086
    "$bundle/bin/svd" "$dir" --ranks 50 --device gpu $(gpu_flag $gpus) $extra --profile \
      --out-dir "$work/prof-$p" --json "$logs/$p.json" >"$logs/$p.log" 2>&1
    rm -rf "$work/prof-$p"
    echo "$name $images --profile gpus=$gpus: $(grep -E '^job:' "$logs/$p.log")"
    grep -E '^  sums|timeline:' "$logs/$p.log" | sed 's/^/    /'
    python3 - "$logs/$p.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["startup"]:
    print(f"    GPU {s['gpu']} start-up (ms): driver {s['init_ms']:.1f}, context {s['context_ms']:.1f}, "
          f"module {s['module_load_ms']:.1f}")
PY
  done; done
  for images in png none; do
    for gpus in $counts; do
      [ "$gpus" = 1 ] && continue
      python3 - "$work/out-$name-$images-1-1/report.csv" "$work/out-$name-$images-$gpus-1/report.csv" \
        "$name $images gpus=$gpus" <<'PY'
import csv, sys
rows = [{(r["name"], r["k"]): r for r in csv.DictReader(open(p))} for p in sys.argv[1:3]]
one, many = rows
same = sum(one[key] == many.get(key) for key in one)
worst = max(abs(float(one[key]["relative_error"]) - float(many[key]["relative_error"]))
            / max(float(one[key]["relative_error"]), 1e-300) for key in one)
print(f"  {sys.argv[3]}: {len(one)} rows on one GPU, {len(many)} here; identical rows {same}; "
      f"largest relative difference of the errors {worst:.2e}")
PY
    done
  done
done
