#!/usr/bin/env bash
# compute-sanitizer over the GPU bundle's test binaries (copied into the bundle by
# scripts/gpu-bundle.sh; run there as gpu-bundle/gpu-sanitize.sh): `--tool memcheck` and
# `--tool racecheck` over every test binary that uses the GPU (bundle.env's gpu_tests), with the GPU
# required (the project's variable), several runs at a time, all within a time budget (8 minutes by
# default, for an H100). Prints, per binary and tool as each run ends, the sanitizer's summary line
# (`ERROR SUMMARY: N errors`, `RACECHECK SUMMARY: … (N errors, M warnings)`) and the test result,
# then a table: ok, ERRORS (the sanitizer found some), TEST FAILED (a test failed; "GPU required but
# missing" when there was no GPU), TIMEOUT (the budget ran out under way) or NOT RUN (no budget left
# to start it). Exit status 0 when every run is ok.
#
# Where a whole binary takes too long under a tool, `subset` below names the tests that tool runs
# (the lines say "subset: N of M tests"); those tests still run whole, at their own sizes. `skip`
# names tests a tool leaves out because their errors are the point of the test (a device-side assert
# that must fail the kernel is an error to memcheck).
#
# Usage: gpu-bundle/gpu-sanitize.sh [-j JOBS] [--budget SECONDS] [--tool memcheck|racecheck]
#                                   [--logs DIR] [TEST_BINARY …]
#   -j JOBS           sanitizer runs at a time (default 4; on a machine with several GPUs each run
#                     takes the next GPU in turn, on one GPU they share it)
#   --budget SECONDS  the whole run's wall-time budget (default 480); each run is stopped when it ends
#   --tool TOOL       only this tool (default both, racecheck's runs first)
#   --logs DIR        one log per run, DIR/TOOL-BINARY.log (default gpu-bundle/logs/sanitize)
#   TEST_BINARY       only these binaries of gpu-bundle/tests (default every one that uses the GPU)
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
. "$bundle/bundle.env"

# The tests a tool runs where the whole binary would not finish in the budget, by TOOL/BINARY
# (`[racecheck/BINARY]="test_one test_two"`): libtest `--exact` names; every other run takes them all.
declare -A subset=(
  # Racecheck (the whole binary did not finish in 300 s): the SVD's kernels on small images — the
  # subspace iteration, the device's small solvers, the job engine, the conversions, the tensor-core
  # GEMM; left out, the largest sizes (the blocked Cholesky up to b = 1000, 48 images of 512 × 400)
  # and the arrival-order test's many small batches, whose kernels the others run.
  [racecheck/svd_factor]="triplets_match_faer_on_odd_shapes_and_edge_cases the_large_subspace_solvers_match_faer
    a_batch_factors_each_image_independently the_gpu_engine_runs_a_job_of_mixed_images
    conversions_and_squared_sums_match_the_host_and_check_their_buffers
    the_tensor_core_gemm_matches_the_fma_gemm_and_exact_products"
)

declare -A skip=(
  # Each provokes a CUDA error on purpose, which memcheck counts: a failed `gpu_assert!` in a child
  # process (9 errors: the assert in each failing warp, then the CUDA calls on the poisoned context)
  # and a stream synchronisation during a graph capture (2: the refused call, the invalidated capture).
  [memcheck/gpu_std]="failed_assert_on_the_gpu_names_kernel_thread_and_message
    a_capture_that_waits_for_the_device_fails_cleanly"
)

jobs=4 budget=480 tools=(racecheck memcheck) logs=$bundle/logs/sanitize binaries=()
usage() { sed -n '/^# Usage:/,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs=${2:?}; shift 2 ;;
    --budget) budget=${2:?}; shift 2 ;;
    --tool) [[ ${2:-} =~ ^(memcheck|racecheck)$ ]] || usage; tools=("$2"); shift 2 ;;
    --logs) logs=${2:?}; shift 2 ;;
    -h | --help | -*) usage ;;
    *) binaries+=("$1"); shift ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ && $budget =~ ^[1-9][0-9]*$ ]] || usage
[ ${#binaries[@]} -gt 0 ] || read -ra binaries <<<"$gpu_tests"
for b in "${binaries[@]}"; do
  [ -x "$bundle/tests/$b" ] || { echo "gpu-sanitize: no test binary $bundle/tests/$b" >&2; exit 2; }
done

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer 2>/dev/null | tail -n 1)
[ -n "$sanitizer" ] || { echo "gpu-sanitize: compute-sanitizer is neither on PATH nor under /usr/local/cuda*/bin" >&2; exit 2; }
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
export "$require_gpu_env=1"
[ -z "$bin_dir_env" ] || export "$bin_dir_env=$bundle/bin"

echo "$package bundle ($revision)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "$("$sanitizer" --version | tail -n 1); $require_gpu_env=1; ${#binaries[@]} test binaries × ${tools[*]}; $jobs at a time, budget ${budget} s; logs in $logs"

# filter TOOL BINARY: the libtest arguments, one a line, that pick the tests TOOL runs (none: all).
filter() {
  # shellcheck disable=SC2206 # the names, split at spaces and newlines
  local -a only=(${subset[$1/$2]:-}) left_out=(${skip[$1/$2]:-})
  [ ${#only[@]} = 0 ] && [ ${#left_out[@]} = 0 ] && return
  printf '%s\n' --exact "${only[@]}"
  for name in "${left_out[@]}"; do printf '%s\n' --skip "$name"; done
}
# count BINARY ARGUMENTS…: how many tests those arguments pick.
count() { "$bundle/tests/$1" --list "${@:2}" 2>/dev/null | grep -c ': test$'; }

# The runs, "TOOL BINARY", within each tool the binaries with the most tests first (the longest runs
# start early).
runs=()
for tool in "${tools[@]}"; do
  while read -r _ name; do runs+=("$tool $name"); done < <(
    for b in "${binaries[@]}"; do
      mapfile -t args < <(filter "$tool" "$b")
      echo "$(count "$b" "${args[@]}") $b"
    done | sort -k1,1nr -k2,2)
done

# sanitize TOOL BINARY LIMIT: one run, stopped after LIMIT seconds; writes its table row to
# $logs/TOOL-BINARY.result and prints its lines.
sanitize() {
  local tool=$1 name=$2 limit=$3 log="$logs/$1-$2.log" start=$SECONDS rc status summary errors scope result
  local -a args
  mapfile -t args < <(filter "$tool" "$name")
  scope="all $(count "$name") tests"
  [ ${#args[@]} = 0 ] || scope="subset: $(count "$name" "${args[@]}") of ${scope#all } (${args[*]:1})"
  timeout -k 20 "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 \
    "$bundle/tests/$name" --test-threads=1 "${args[@]}" >"$log" 2>&1
  rc=$?
  # Every process the test started has its summary; the test binary's own comes last.
  if [ "$tool" = racecheck ]; then
    summary=$(grep -o 'RACECHECK SUMMARY: .*' "$log" | tail -n 1)
    errors=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$log" | awk '{n += $1} END {print n + 0}')
  else
    summary=$(grep -o 'ERROR SUMMARY: .*' "$log" | tail -n 1)
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | awk '{n += $1} END {print n + 0}')
  fi
  result=$(grep '^test result:' "$log" | tail -n 1)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    status="TIMEOUT (stopped at the budget's end)"
  elif grep -q "the GPU is required ($require_gpu_env=1)" "$log"; then
    status="TEST FAILED (GPU required but missing)"
  elif [ "$errors" -gt 0 ]; then
    status=ERRORS
  elif [ "$rc" != 0 ]; then
    status="TEST FAILED (exit status $rc)"
  elif [ -z "$summary" ]; then
    status="FAILED (no sanitizer summary)"
  else
    status=ok
  fi
  grep -q "terminated before first instrumented API call" "$log" && summary="no CUDA call: ${summary:-no summary}"
  printf '%-10s %-14s %-40s %4d s  %s\n' "$tool" "$name" "$status" $((SECONDS - start)) "${summary:-no sanitizer summary}" \
    >"$logs/$tool-$name.result"
  # One write, so that the lines of runs ending together do not interleave.
  printf '[%s] %s (%s): %s, %d s\n    %s\n    %s\n' "$tool" "$name" "$scope" "$status" $((SECONDS - start)) \
    "${summary:-no sanitizer summary line}" "${result:-no test result line}"
}

# With several GPUs (and none chosen by CUDA_VISIBLE_DEVICES), each run takes the next in turn.
gpus=1
if [ -z "${CUDA_VISIBLE_DEVICES:-}" ] && command -v nvidia-smi >/dev/null; then
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  [ "$gpus" -ge 1 ] || gpus=1
fi
deadline=$((SECONDS + budget))
rm -f "$logs"/*.result
running=0 started=0
for run in "${runs[@]}"; do
  read -r tool name <<<"$run"
  while [ "$running" -ge "$jobs" ]; do wait -n; running=$((running - 1)); done
  left=$((deadline - SECONDS))
  if [ "$left" -lt 20 ]; then
    printf '%-10s %-14s %-40s %4s    %s\n' "$tool" "$name" "NOT RUN (budget spent)" - - >"$logs/$tool-$name.result"
    echo "[$tool] $name: NOT RUN, ${left} s of the budget left"
    continue
  fi
  if [ "$gpus" -gt 1 ]; then
    CUDA_VISIBLE_DEVICES=$((started % gpus)) sanitize "$tool" "$name" "$left" &
  else
    sanitize "$tool" "$name" "$left" &
  fi
  running=$((running + 1)) started=$((started + 1))
done
wait

echo "== compute-sanitizer summary"
printf '%-10s %-14s %-40s %6s  %s\n' tool binary status time "sanitizer summary (the test binary's own)"
failures=0
for run in "${runs[@]}"; do
  read -r tool name <<<"$run"
  row=$(cat "$logs/$tool-$name.result")
  echo "$row"
  [[ $row =~ ^[a-z]+\ +[^\ ]+\ +ok\  ]] || failures=$((failures + 1))
done
echo "failures: $failures of ${#runs[@]} runs ($((SECONDS - deadline + budget)) s)"
[ "$failures" = 0 ]
