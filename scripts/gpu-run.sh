#!/usr/bin/env bash
# Runner of the GPU bundle (built by scripts/gpu-bundle.sh, copied there as run.sh), for a CUDA
# machine without Rust. Runs every test binary of tests/ with the GPU required (the project's
# variable, from bundle.env: a skip is a failure) and, when the bundle has the Python wheel, its
# pytest suite (python-gpu.sh: NumPy arrays, PyTorch tensors in place), then — unless --tests-only —
# the commands listed by gpu-commands.sh when the bundle has one (the project's
# scripts/gpu-commands.sh) and every benchmark of benches/, and prints a summary: per binary ok,
# FAILED, or FAILED (GPU required but missing).
# After the tests, every GPU test binary runs again as several concurrent processes
# (gpu-concurrent.sh; 6 unless --concurrent N, 0 to skip), since an ordering fault between queues
# hides while a test has the GPU to itself.
# compute-sanitizer memcheck and racecheck are gpu-sanitize.sh's work (about 8 minutes on an H100).
# Usage: gpu-bundle/run.sh [--tests-only] [--concurrent N] [LOG_DIR]
#        (logs, one per binary: LOG_DIR, default gpu-bundle/logs)
# Exit status 0 when everything passed.
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tests_only=false
concurrent=6
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) tests_only=true; shift ;;
    --concurrent) concurrent=${2:?--concurrent takes a number of processes}; shift 2 ;;
    *) break ;;
  esac
done
logs=${1:-$bundle/logs}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
# shellcheck source=/dev/null
. "$bundle/bundle.env"
export "$require_gpu_env=1" BENCH_OUT_DIR="$logs"
[ -z "$bin_dir_env" ] || export "$bin_dir_env=$bundle/bin"
summary=()
failures=0

record() { # name status
  summary+=("$(printf '%-44s %s' "$1" "$2")")
  [ "$2" = ok ] || failures=$((failures + 1))
}

echo "$package bundle ($revision)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== tests (GPU required: $require_gpu_env=1)"
for t in "$bundle"/tests/*; do
  name=$(basename "$t")
  log="$logs/test-$name.log"
  listed=$("$t" --list 2>/dev/null | grep -c ': test$')
  if "$t" --test-threads=1 >"$log" 2>&1; then
    record "test $name" ok
  elif grep -q "the GPU is required ($require_gpu_env=1)" "$log"; then
    record "test $name" "FAILED (GPU required but missing)"
  else
    record "test $name" FAILED
  fi
  echo "  $name: $listed tests listed"
  grep -E "^test result:|SKIPPED|panicked" "$log" | sed "s/^/  $name: /"
done

if [ "$concurrent" -gt 0 ] && [ -n "$gpu_tests" ]; then
  echo "== GPU tests as $concurrent concurrent processes each (gpu-concurrent.sh)"
  if "$bundle/gpu-concurrent.sh" "$concurrent" "$logs"; then
    record "tests, $concurrent concurrent processes" ok
  else
    record "tests, $concurrent concurrent processes" FAILED
  fi
fi

if [ -d "$bundle/python" ] && [ -x "$bundle/python-gpu.sh" ]; then
  echo "== Python package (python-gpu.sh: its tests with the GPU required)"
  if "$bundle/python-gpu.sh" >"$logs/python.log" 2>&1; then record "python tests" ok; else record "python tests" FAILED; fi
  tail -n 1 "$logs/python.log" | sed "s/^/  python: /"
fi

run_cmd() { # label command...
  local label=$1; shift
  if "$@" >"$logs/cmd-$label.log" 2>&1; then record "cmd $label" ok; else record "cmd $label" FAILED; fi
  sed "s/^/  $label: /" "$logs/cmd-$label.log"
}
if ! $tests_only; then
  if [ -f "$bundle/gpu-commands.sh" ]; then
    echo "== commands on the GPU"
    # shellcheck source=/dev/null
    . "$bundle/gpu-commands.sh"
  fi
  echo "== benchmarks"
  for b in "$bundle"/benches/*; do
    [ -e "$b" ] || continue
    run_cmd "bench-$(basename "$b")" "$b"
  done
fi

echo "== summary"
printf '%s\n' "${summary[@]}"
echo "failures: $failures"
[ "$failures" = 0 ]
