#!/usr/bin/env bash
# Builds the GPU bundle of this project, for a CUDA machine that has no Rust: in release mode, every
# test binary (gpu-bundle/tests), benchmark (benches) and command (bin) of the package, found from
# cargo's own JSON messages; the runner (scripts/gpu-run.sh, as run.sh); every other script of
# scripts/ that runs there (all but the build-side tools: gpu-sanitize.sh, python-gpu.sh, the bench
# scripts, …); bundle.env, what those scripts need to know of the project (its GPU-required variable,
# read from tests/common/mod.rs, and which test binaries use the GPU); the Python wheel and its tests
# when python/ exists; then gpu-bundle.tar.xz of it all (about a tenth of the size).
#
# Usage: scripts/gpu-bundle.sh           builds gpu-bundle/ and gpu-bundle.tar.xz in the project's root
#        scripts/gpu-bundle.sh --list    prints what the bundle would hold (cargo metadata; builds nothing)
# There: copy gpu-bundle/ (or unpack the .tar.xz) and run gpu-bundle/run.sh (tests with the GPU
# required, then the commands and benchmarks), gpu-bundle/gpu-sanitize.sh (compute-sanitizer memcheck
# and racecheck) and, with the wheel, gpu-bundle/python-gpu.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "${1:-}" in
  "") list=false ;;
  --list) list=true ;;
  *) echo "usage: scripts/gpu-bundle.sh [--list]" >&2; exit 2 ;;
esac
"$root/scripts/setup.sh"
cd "$root"

# The project's environment variables, from its test helpers: the one that makes a missing GPU a
# failure (`new-project` names it after the crate) and, where the helpers have it, the one that points
# the tests at the bundle's copies of the commands.
common=tests/common/mod.rs
require_gpu_env=$(sed -n 's/.*REQUIRE_GPU_ENV: &str = "\([A-Za-z0-9_]*\)".*/\1/p' "$common")
[ -n "$require_gpu_env" ] || { echo "gpu-bundle: $common declares no \`REQUIRE_GPU_ENV: &str = \"…\"\`" >&2; exit 1; }
bin_dir_env=$(sed -n 's/.*var_os("\([A-Za-z0-9_]*_BIN_DIR\)").*/\1/p' "$common" | head -n 1)

# The package's targets (cargo metadata): "KIND NAME" per line, KIND test (its name in tests/: the
# integration test's, or `<lib>-lib` for the library's unit tests), gpu-test (a test whose source
# calls the helpers that take the GPU: common::devices, gpu_or_skip, Device::gpu), bench or bin;
# then "package NAME" and "target_dir DIR".
targets=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, re, sys
meta = json.load(sys.stdin)
package = next(p for p in meta["packages"] if p["manifest_path"] == sys.argv[1])
for t in package["targets"]:
    kind = t["kind"][0]
    if kind in ("lib", "test") and t["test"]:
        uses_gpu = re.search(r"\b(devices|gpu_or_skip|Device::gpu)\(", open(t["src_path"]).read())
        print("gpu-test" if uses_gpu else "test", t["name"] if kind == "test" else t["name"] + "-lib")
    elif kind in ("bench", "bin"):
        print(kind, t["name"])
print("package", package["name"])
print("target_dir", meta["target_directory"])
' "$root/Cargo.toml")
field() { awk -v k="$1" '$1 == k {print $2}' <<<"$targets" | paste -sd' ' -; }
package=$(field package)
target_dir=$(field target_dir)
gpu_tests=$(field gpu-test)
# Scripts that need Rust or the sources stay behind; gpu-run.sh goes as run.sh.
build_side='^(cargo|setup\.sh|new-project|new-family|sass-diff|gpu-bundle\.sh|gpu-run\.sh|python-test\.sh|python-wheel\.sh)$'
scripts=$(ls scripts | grep -Ev "$build_side" | paste -sd' ' -)
python=$([ -d python ] && echo "wheel and tests (python/)" || echo "none (no python/)")

if $list; then
  cat <<EOF
package:     $package
GPU-required variable: $require_gpu_env
bin-folder variable:   ${bin_dir_env:-none}
tests:       $(printf '%s\n' $(field test) $gpu_tests | sort | paste -sd' ' -)
GPU tests:   $gpu_tests
benches:     $(field bench)
bin:         $(field bin)
scripts:     run.sh (scripts/gpu-run.sh) $scripts
python:      $python
EOF
  exit 0
fi

bundle="$root/gpu-bundle"
rm -rf "$bundle" "$root/gpu-bundle.tar.xz"
mkdir -p "$bundle/tests" "$bundle/bin" "$bundle/benches"

# copy_artifacts MODE DEST: copies the executables cargo reports on stdin (JSON messages) into DEST —
# MODE test: test harnesses, named as in `targets` above (the commands' harnesses hold no tests);
# bench or bin: targets of that kind. Compiler errors are shown.
copy_artifacts() {
  python3 -c '
import json, os, shutil, sys
mode, dest = sys.argv[1:]
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-message" and msg["message"]["level"] == "error":
        sys.stderr.write(msg["message"]["rendered"])
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    kind, name = msg["target"]["kind"][0], msg["target"]["name"]
    if mode == "test":
        if not msg["profile"]["test"] or kind == "bin":
            continue
        if kind != "test":
            name += "-" + kind
    elif kind != mode:
        continue
    shutil.copy2(msg["executable"], os.path.join(dest, name))
' "$1" "$2"
}

export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols
[ -z "$(field bin)" ] || cargo build --release --bins --message-format=json | copy_artifacts bin "$bundle/bin"
cargo test --release --no-run --message-format=json | copy_artifacts test "$bundle/tests"
cargo bench --no-run --message-format=json | copy_artifacts bench "$bundle/benches"
cp "$target_dir"/release/kernels/ptxas-report.txt "$target_dir"/release/kernels/kernels.ptx "$bundle/" 2>/dev/null || true
if [ -d python ]; then # the Python package: its wheel and tests, run there by python-gpu.sh
  "$root/scripts/python-wheel.sh" "$bundle/python"
  cp -r python/tests "$bundle/python/"
fi
cp scripts/gpu-run.sh "$bundle/run.sh"
for s in $scripts; do cp "scripts/$s" "$bundle/"; done
cat >"$bundle/bundle.env" <<EOF
# Written by scripts/gpu-bundle.sh; sourced by run.sh and gpu-sanitize.sh.
package=$package
revision="$(git describe --always --dirty 2>/dev/null || echo "not a git checkout"), built $(date -u '+%F %H:%M UTC')"
require_gpu_env=$require_gpu_env
bin_dir_env=$bin_dir_env
gpu_tests="$gpu_tests"
EOF

# Every target cargo lists must be there.
missing=""
for t in $(field test) $gpu_tests; do [ -x "$bundle/tests/$t" ] || missing+=" tests/$t"; done
for t in $(field bench); do [ -x "$bundle/benches/$t" ] || missing+=" benches/$t"; done
for t in $(field bin); do [ -x "$bundle/bin/$t" ] || missing+=" bin/$t"; done
[ -z "$missing" ] || { echo "gpu-bundle: not built:$missing" >&2; exit 1; }

tar cf - -C "$root" gpu-bundle | xz -T0 -6 >"$root/gpu-bundle.tar.xz"
du -sh "$bundle" "$root/gpu-bundle.tar.xz"
ls "$bundle" "$bundle/tests" "$bundle/bin" "$bundle/benches"
