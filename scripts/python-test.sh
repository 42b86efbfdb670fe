#!/usr/bin/env bash
# Builds the Python wheel (scripts/python-wheel.sh) into target/wheels/, installs it into a fresh
# virtual environment (target/python-venv) with its test dependencies (python/pyproject.toml's
# `test` extra: pytest, …), and runs python/tests there. Extra arguments go to pytest (e.g.
# -k saxpy). KERNEL_SUITE_REQUIRE_GPU=1 makes a missing GPU a failure instead of a skip.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
venv=$root/target/python-venv
python3 -m venv --clear "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.9,<2"
"$root/scripts/python-wheel.sh" "$root/target/wheels"
wheel=$(ls "$root"/target/wheels/kernel_suite-*.whl)
"$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel[test]"
# From outside the source tree, so that `import kernel_suite` is the installed wheel; --rootdir: test
# modules named from their folder, never after a folder above it that has the package's name.
cd "$root/target"
"$venv/bin/python" -m pytest -q -rs --import-mode=importlib --rootdir "$root/python/tests" "$root/python/tests" "$@"
