#!/usr/bin/env bash
# Builds the Python wheel (scripts/python-wheel.sh) into target/wheels/, installs it into the
# virtual environment target/python-venv with its test dependencies (python/pyproject.toml's
# `test` extra: pytest, …), and runs python/tests there. Extra arguments go to pytest (e.g.
# -k saxpy). KERNEL_SUITE_REQUIRE_GPU=1 makes a missing GPU a failure instead of a skip.
# The environment is kept between runs: made (with maturin) only where missing, the test
# dependencies installed again only when pyproject.toml changes, and the wheel rebuilt by cargo's
# incremental build and reinstalled alone, so an edit-and-test round takes seconds.
# PYTHON_TEST_FRESH=1 starts from a new environment.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
venv=$root/target/python-venv
if [ "${PYTHON_TEST_FRESH:-0}" = 1 ] || [ ! -x "$venv/bin/maturin" ] || ! "$venv/bin/python" -c '' 2>/dev/null; then
  python3 -m venv --clear "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.9,<2"
else
  echo "python-test: reusing $venv"
fi
"$root/scripts/python-wheel.sh" "$root/target/wheels"
wheel=$(ls "$root"/target/wheels/*.whl)
# The test dependencies, again only when pyproject.toml changed since they were installed.
stamp=$venv/.test-dependencies
wanted=$(sha256sum "$root/python/pyproject.toml" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel[test]"
  echo "$wanted" >"$stamp"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
# From outside the source tree, so that `import kernel_suite` is the installed wheel; --rootdir: test
# modules named from their folder, never after a folder above it that has the package's name.
cd "$root/target"
"$venv/bin/python" -m pytest -q -rs --import-mode=importlib --rootdir "$root/python/tests" "$root/python/tests" "$@"
