#!/usr/bin/env bash
# Runner of the GPU bundle (see scripts/gpu-bundle.sh), for a CUDA machine without Rust.
# Runs every test binary with the GPU required (a skip is a failure), then the same tests under
# compute-sanitizer memcheck and racecheck when it is installed, then the commands on the GPU, and prints a summary.
# Usage: gpu-bundle/run.sh [LOG_DIR]
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs=${1:-$bundle/logs}
mkdir -p "$logs"
export KERNEL_SUITE_REQUIRE_GPU=1 KERNEL_SUITE_BIN_DIR="$bundle/bin" BENCH_OUT_DIR="$logs"
summary=()
failures=0

record() { # name status
  summary+=("$(printf '%-44s %s' "$1" "$2")")
  [ "$2" = ok ] || failures=$((failures + 1))
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== tests (GPU required)"
for t in "$bundle"/tests/*; do
  name=$(basename "$t")
  if "$t" --test-threads=1 >"$logs/test-$name.log" 2>&1; then
    record "test $name" ok
  else
    record "test $name" FAILED
  fi
  grep -E "^test result|SKIPPED|panicked" "$logs/test-$name.log" | sed "s/^/  $name: /"
done

sanitize() { # tool: memcheck over every test binary, racecheck (shared-memory hazards) too
  local tool=$1
  echo "== compute-sanitizer $tool"
  for t in "$bundle"/tests/*; do
    name=$(basename "$t")
    log="$logs/$tool-$name.log"
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" --test-threads=1 >"$log" 2>&1
    rc=$?
    # memcheck ends with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: … (N errors, …)".
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p; s/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    if grep -q "terminated before first instrumented API call" "$log"; then
      echo "  $name: makes no CUDA calls (simulator/host-only tests)"
    else
      echo "  $name: rc=$rc, ${errors:-?} $tool errors"
      if [ "$rc" = 0 ] && [ "${errors:-0}" = 0 ]; then record "$tool $name" ok; else record "$tool $name" FAILED; fi
    fi
  done
}
if command -v compute-sanitizer >/dev/null; then
  sanitize memcheck
  sanitize racecheck
else
  echo "== compute-sanitizer not installed: memcheck and racecheck skipped"
fi

echo "== commands on the GPU"
run_cmd() { # label command...
  local label=$1; shift
  if "$@" >"$logs/cmd-$label.log" 2>&1; then record "cmd $label" ok; else record "cmd $label" FAILED; fi
  sed "s/^/  $label: /" "$logs/cmd-$label.log"
}
run_cmd saxpy "$bundle/bin/saxpy" --device gpu
run_cmd conv "$bundle/bin/conv" --device gpu --width 4096 --height 4096 --runs 20 --check --output "$logs/conv.png"
run_cmd spiral "$bundle/bin/spiral" --new --seed 1 --device gpu --output "$logs/spiral.png"
run_cmd lombscargle "$bundle/bin/lombscargle" --device gpu --variant recurrence --precision f32 \
  --output "$logs/lombscargle.csv" --plot "$logs/lombscargle.png"

echo "== benchmarks"
run_cmd bench "$bundle/bin/bench" --out-dir "$logs/bench"
for b in "$bundle"/benches/*; do
  [ -e "$b" ] || continue
  run_cmd "bench-$(basename "$b")" "$b"
done

echo "== summary"
printf '%s\n' "${summary[@]}"
echo "failures: $failures"
[ "$failures" = 0 ]
