#!/usr/bin/env bash
# On a GPU machine with the bundle (gpu-bundle/python-gpu.sh): installs the bundled wheel beside the
# machine's own Python (--no-deps: its NumPy, SciPy, PyTorch, CuPy, Numba and JAX are used; nothing is
# fetched) and runs the pytest suite with the GPU required: the kernels on NumPy arrays, and in place
# on PyTorch tensors and the other libraries' GPU arrays.
# With `bench`: the Python benchmark (docs/benchmarks/python.md) with the Rust benches of the same
# kernels in the same run.
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
site=$(mktemp -d)
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$site" \
  "$bundle"/python/kernel_suite-*.whl
export PYTHONPATH=$site XLA_PYTHON_CLIENT_PREALLOCATE=false
# --rootdir: test modules named from their folder, never after a folder above it that has the
# package's name.
(cd "$site" && KERNEL_SUITE_REQUIRE_GPU=1 python3 -m pytest -q -rs -p no:cacheprovider --import-mode=importlib \
  --rootdir "$bundle/python/tests" "$bundle/python/tests")
rc=$?
if [ "${1:-}" = bench ]; then
  "$bundle/benches/conv" >"$site/rust-conv.log" 2>&1
  "$bundle/benches/lombscargle" >"$site/rust-lombscargle.log" 2>&1
  python3 "$bundle/python_bench.py" "$site/rust-conv.log" "$site/rust-lombscargle.log" || rc=1
fi
exit $rc
