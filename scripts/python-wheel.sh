#!/usr/bin/env bash
# Builds the Python wheel (maturin, release, abi3) into the folder given (default target/wheels):
# the extension, and the stand-in driver (python/driver-stub) that lets the package import on a
# machine without the NVIDIA driver; checks that the stand-in answers every driver symbol the
# extension uses. Maturin comes from target/python-venv (created with it if missing).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/target/wheels}
"$root/scripts/setup.sh"
cd "$root"
venv=$root/target/python-venv
[ -x "$venv/bin/maturin" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.9,<2"; }
cargo build --release --quiet --manifest-path python/driver-stub/Cargo.toml
# Cargo's target directory: `target/` unless CARGO_TARGET_DIR or a config moves it.
target_dir=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
mkdir -p python/kernel_suite/_driver_stub
cp "$target_dir/release/libcuda_stub.so" python/kernel_suite/_driver_stub/libcuda.so.1
rm -rf "$out"
# `linux` compatibility: no manylinux repair, which would refuse (or bundle) the driver's libcuda.so.1.
"$venv/bin/maturin" build --release --quiet --compatibility linux -m python/Cargo.toml -o "$out"
wheel=$(ls "$out"/kernel_suite-*.whl)
check=$(mktemp -d)
python3 -m zipfile -e "$wheel" "$check"
missing=$(comm -23 <(nm -D --undefined-only "$check"/kernel_suite/_native*.so | awk '$2 ~ /^cu/ {print $2}' | sort) \
  <(nm -D --defined-only "$check"/kernel_suite/_driver_stub/libcuda.so.1 | awk '{print $3}' | sort))
rm -rf "$check"
if [ -n "$missing" ]; then
  echo "python/driver-stub lacks driver symbols the extension uses: $missing" >&2
  exit 1
fi
echo "wheel: $wheel"
