#!/usr/bin/env bash
# Runs each GPU test binary of the bundle (built by scripts/gpu-bundle.sh) as several concurrent
# processes on one GPU, with the GPU required: an ordering fault between queues (a copy or launch
# left on the wrong queue, a wait that does not cover it) hides while a test has the GPU to itself
# and shows when other processes delay its queues. run.sh calls it after the tests; alone:
# Usage: gpu-bundle/gpu-concurrent.sh [PROCESSES (default 6)] [LOG_DIR (default gpu-bundle/logs)] [BINARY …]
# Prints, per binary, how many of the processes passed; exit status 0 when all did.
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
processes=${1:-6}
logs=${2:-$bundle/logs}
shift $(($# < 2 ? $# : 2))
mkdir -p "$logs/concurrent"
logs=$(cd "$logs/concurrent" && pwd)
# shellcheck source=/dev/null
. "$bundle/bundle.env"
export "$require_gpu_env=1"
[ -z "$bin_dir_env" ] || export "$bin_dir_env=$bundle/bin"
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || read -r -a binaries <<<"$gpu_tests"

failures=0
for name in "${binaries[@]}"; do
  pids=()
  for p in $(seq 1 "$processes"); do
    "$bundle/tests/$name" --test-threads=1 >"$logs/$name.$p.log" 2>&1 &
    pids+=($!)
  done
  passed=0
  for p in "${!pids[@]}"; do
    if wait "${pids[$p]}"; then
      passed=$((passed + 1))
    else
      grep -hE "panicked|^---- " "$logs/$name.$((p + 1)).log" | head -n 4 | sed "s/^/    $name #$((p + 1)): /"
    fi
  done
  if [ "$passed" = "$processes" ]; then
    printf '  %-36s ok (%s of %s processes)\n' "$name" "$passed" "$processes"
  else
    printf '  %-36s FAILED (%s of %s processes passed; logs %s/%s.*.log)\n' "$name" "$passed" "$processes" "$logs" "$name"
    failures=$((failures + 1))
  fi
done
[ "$failures" = 0 ]
