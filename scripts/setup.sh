#!/usr/bin/env bash
# Prepares a machine to build and test the suite. Idempotent; quick once done.
#
#  1. Rust: the nightly pinned in rust-toolchain.toml (with rust-src, llvm-tools, rustfmt, clippy)
#     and the llvm-bitcode-linker component from the toolchain the kernel builder (gpu-builder) names.
#  2. CUDA pieces, unless CUDA_HOME/CUDA_PATH (or /usr/local/cuda) holds a toolkit: libdevice,
#     ptxas and the CUDA headers from NVIDIA's PyPI wheels, unpacked once per machine (in
#     ${XDG_CACHE_HOME:-~/.cache}/rust-gpu-kernels, shared by every project made from this suite)
#     and linked as a toolkit-like directory in .cache/cuda/root.
#  3. A libcuda.so to link against: the installed driver's, else Debian's libcuda1 (non-free; while
#     another package manager holds apt's lock, it waits and says so). On a machine without a GPU it
#     loads, and the programs report "no GPU" at run time.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cuda_root="$root/.cache/cuda/root"
nvcc_wheel="nvidia-cuda-nvcc-cu12==12.9.86"
runtime_wheel="nvidia-cuda-runtime-cu12==12.9.79"
# The unpacked wheels, one directory per pair of versions, for every project on this machine.
machine_cache="${XDG_CACHE_HOME:-$HOME/.cache}/rust-gpu-kernels/cuda-${nvcc_wheel##*==}-${runtime_wheel##*==}"

say() { echo "setup: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# apt's and dpkg's locks: another package manager (unattended-upgrades, a second setup) may hold one.
apt_locks=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
# The first of them that a process holds, as "PATH (process PID, NAME)"; nothing when all are free.
apt_lock_holder() {
  as_root python3 -c '
import fcntl, os, struct, sys
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        continue
    query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    kind, _, _, _, pid = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, query))
    os.close(fd)
    if kind != fcntl.F_UNLCK:
        try:
            name = open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            name = "?"
        print(f"{path} (process {pid}, {name})")
        break
' "${apt_locks[@]}"
}
# Waits while another package manager holds apt's or dpkg's locks, saying so; gives up after 10 minutes.
wait_for_apt() {
  local holder waited=0
  while holder=$(apt_lock_holder) && [ -n "$holder" ]; do
    [ "$waited" -gt 0 ] || say "waiting for another package manager to finish: $holder holds the lock"
    [ "$waited" -lt 600 ] || { say "gave up after 10 minutes: $holder still holds the lock"; exit 1; }
    sleep 5
    waited=$((waited + 5))
  done
}

# 1. Rust toolchains (rustup reads rust-toolchain.toml in the repository root).
(cd "$root" && rustup toolchain install >/dev/null 2>&1) || (cd "$root" && rustup toolchain install)
# The kernel builder's source names the toolchain: this checkout's gpu-builder/, or in a project the
# crate cargo takes from the suite (a path or a git checkout).
builder_src=$root/gpu-builder/src/lib.rs
if [ ! -f "$builder_src" ]; then
  builder_manifest=$(cd "$root" && cargo metadata --format-version 1 --color never | python3 -c '
import json, sys
print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "gpu-builder"))')
  builder_src=$(dirname "$builder_manifest")/src/lib.rs
fi
linker_toolchain=$(sed -n 's/^pub const LINKER_TOOLCHAIN: &str = "\(.*\)";/\1/p' "$builder_src")
[ -n "$linker_toolchain" ] || { say "no \`pub const LINKER_TOOLCHAIN\` in $builder_src"; exit 1; }
if ! rustup run "$linker_toolchain" rustc --print sysroot >/dev/null 2>&1 ||
   [ ! -x "$(rustup run "$linker_toolchain" rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/host: //p')/bin/self-contained/llvm-bitcode-linker" ]; then
  say "installing llvm-bitcode-linker ($linker_toolchain)"
  rustup toolchain install "$linker_toolchain" --profile minimal -c llvm-bitcode-linker
fi

# 2. libdevice + ptxas + headers.
has_toolkit() { [ -n "${1:-}" ] && [ -f "$1/nvvm/libdevice/libdevice.10.bc" ]; }
if has_toolkit "${CUDA_HOME:-}" || has_toolkit "${CUDA_PATH:-}"; then
  say "using the CUDA toolkit in ${CUDA_HOME:-$CUDA_PATH}"
elif [ ! -f "$cuda_root/nvvm/libdevice/libdevice.10.bc" ]; then
  if [ ! -f "$machine_cache/nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" ]; then
    say "fetching libdevice, ptxas and CUDA headers from PyPI ($nvcc_wheel, $runtime_wheel) into $machine_cache"
    mkdir -p "$(dirname "$machine_cache")"
    # Unpacked beside the cache and renamed into place, so that a concurrent setup never sees half.
    work=$(mktemp -d "$machine_cache.XXXXXX")
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work/wheels" \
      "$nvcc_wheel" "$runtime_wheel"
    for w in "$work"/wheels/*.whl; do
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$w" "$work/unpacked"
    done
    chmod +x "$work/unpacked/nvidia/cuda_nvcc/bin/ptxas"
    mv -T "$work/unpacked" "$machine_cache" 2>/dev/null || [ -d "$machine_cache" ]
    rm -rf "$work"
  else
    say "using the CUDA pieces already on this machine ($machine_cache)"
  fi
  mkdir -p "$cuda_root/bin" "$cuda_root/lib64"
  ln -sfn "$machine_cache/nvidia/cuda_nvcc/bin/ptxas" "$cuda_root/bin/ptxas"
  ln -sfn "$machine_cache/nvidia/cuda_nvcc/nvvm" "$cuda_root/nvvm"
  ln -sfn "$machine_cache/nvidia/cuda_runtime/include" "$cuda_root/include"
fi

# 3. libcuda.so for linking (and, without a GPU, for the "no GPU" message at run time).
find_libcuda() { ldconfig -p 2>/dev/null | sed -n 's/.*libcuda\.so\.1 (libc6,x86-64) => //p' | head -n 1; }
libcuda=$(find_libcuda)
if [ -z "$libcuda" ]; then
  say "no CUDA driver library: installing Debian's libcuda1 (contrib, non-free)"
  . /etc/os-release
  as_root tee /etc/apt/sources.list.d/kernel-suite-non-free.sources >/dev/null <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $VERSION_CODENAME
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  wait_for_apt
  as_root apt-get -o DPkg::Lock::Timeout=600 update -qq
  wait_for_apt
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends libcuda1 >/dev/null
  libcuda=$(find_libcuda)
  [ -n "$libcuda" ] || { say "libcuda1 did not provide libcuda.so.1"; exit 1; }
fi
mkdir -p "$cuda_root/lib64"
ln -sfn "$libcuda" "$cuda_root/lib64/libcuda.so"
