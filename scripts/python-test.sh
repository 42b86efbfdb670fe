#!/usr/bin/env bash
# Builds the Python wheel (scripts/python-wheel.sh) into target/wheels/, installs it into a fresh
# virtual environment (target/python-venv) with NumPy, SciPy and pytest, and runs python/tests there.
# Extra arguments go to pytest (e.g. -k convolve). KERNEL_SUITE_REQUIRE_GPU=1 makes a missing GPU a
# failure instead of a skip.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
venv=$root/target/python-venv
python3 -m venv --clear "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.9,<2" numpy scipy pytest
"$root/scripts/python-wheel.sh" "$root/target/wheels"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$root"/target/wheels/kernel_suite-*.whl
# From outside the source tree, so that `import kernel_suite` is the installed wheel.
cd "$root/target"
"$venv/bin/python" -m pytest -q -rs --import-mode=importlib "$root/python/tests" "$@"
