#!/usr/bin/env bash
# Builds, in release mode, every test binary, benchmark and command into gpu-bundle/, with the runner
# (scripts/gpu-run.sh) and the Python wheel with its tests (python-gpu.sh), for a CUDA machine that has
# no Rust, plus gpu-bundle.tar.xz of it (about a tenth of the size). Copy either there and run
# `gpu-bundle/run.sh` (and `gpu-bundle/python-gpu.sh`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
cd "$root"
bundle="$root/gpu-bundle"
rm -rf "$bundle"
mkdir -p "$bundle/tests" "$bundle/bin" "$bundle/benches"

export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols
cargo build --release --bins
cargo test --release --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys, shutil, os
dest = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
        kind = msg["target"]["kind"][0]
        if kind == "bin":  # unit-test harnesses of the commands: they hold no tests
            continue
        name = msg["target"]["name"] if kind == "test" else msg["target"]["name"] + "-" + kind
        shutil.copy2(msg["executable"], os.path.join(dest, name))
' "$bundle/tests"
cargo bench --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["kind"] == ["bench"]:
        shutil.copy2(msg["executable"], os.path.join(sys.argv[1], msg["target"]["name"]))
' "$bundle/benches"
for exe in $(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(" ".join(t["name"] for p in json.load(sys.stdin)["packages"] if p["name"]=="kernel-suite" for t in p["targets"] if "bin" in t["kind"]))'); do
  cp "target/release/$exe" "$bundle/bin/"
done
cp target/release/kernels/ptxas-report.txt target/release/kernels/kernels.ptx "$bundle/" 2>/dev/null || true
# The Python package: its wheel and tests, run there by python-gpu.sh.
"$root/scripts/python-wheel.sh" "$bundle/python"
cp -r python/tests "$bundle/python/"
cp scripts/gpu-run.sh "$bundle/run.sh"
cp scripts/svd-job-bench.sh scripts/svd-gpus-bench.sh scripts/svd-host-bench.sh scripts/svd_peers.py scripts/gemm_peers.py scripts/conv_peer.py \
  scripts/primitives-bench.sh scripts/primitives_peers.py scripts/python-gpu.sh scripts/python_bench.py "$bundle/"
tar cf - -C "$root" gpu-bundle | xz -T0 -6 >"$root/gpu-bundle.tar.xz"
du -sh "$bundle" "$root/gpu-bundle.tar.xz"
ls "$bundle/tests" "$bundle/bin" "$bundle/benches"
