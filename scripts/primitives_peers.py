"""CuPy (and PyTorch) peers of the histogram, reduce, scan and transpose benchmarks, timed like them.

Prints, per size 2^20, 2^24, 2^26: the median of 100 CUDA-event-timed calls (after 10 warm-up
calls) of cupy.histogram and cupy.bincount on uint8, cupy.sum and cupy.min + cupy.max on float32,
cupy.cumsum on uint32 (uint32 result), the same in PyTorch where it has them, and the transpose
of a float32 matrix (cupy.ascontiguousarray(m.T), torch's .t().contiguous()); then the
device-to-device copy bandwidth of a 1 GiB array (read + write), the memory floor the kernels are
compared with. Run by scripts/primitives-bench.sh.
"""

import cupy as cp
import numpy as np

try:
    import torch
except ImportError:  # the CuPy peers alone
    torch = None


def median_ms(fn, runs=100, warmup=10):
    for _ in range(warmup):
        fn()
    start = [cp.cuda.Event() for _ in range(runs)]
    end = [cp.cuda.Event() for _ in range(runs)]
    for s, e in zip(start, end):
        s.record()
        fn()
        e.record()
    end[-1].synchronize()
    return float(np.median([cp.cuda.get_elapsed_time(s, e) for s, e in zip(start, end)]))


def row(name, n, ms, bytes_moved):
    print(f"{name:28s} {n:>10d} {ms:10.4f} ms {bytes_moved / (ms * 1e-3) / 1e9:8.0f} GB/s")


def main():
    rng = np.random.default_rng(0)
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, CuPy {cp.__version__}"
          + (f", PyTorch {torch.__version__}" if torch else ""))
    for n in (1 << 20, 1 << 24, 1 << 26):
        b = cp.asarray(rng.integers(0, 256, n, dtype=np.uint8))
        f = cp.asarray(rng.uniform(-1, 1, n).astype(np.float32))
        u = cp.asarray(rng.integers(0, 2**32, n, dtype=np.uint32))
        assert int(cp.cumsum(u, dtype=cp.uint32)[-1]) == int(u.astype(cp.uint64).sum()) % 2**32
        row("cupy.histogram uint8", n, median_ms(lambda: cp.histogram(b, bins=256, range=(0, 256))), n)
        row("cupy.bincount uint8", n, median_ms(lambda: cp.bincount(b, minlength=256)), n)
        row("cupy.sum float32", n, median_ms(lambda: cp.sum(f)), 4 * n)
        row("cupy.min+max float32", n, median_ms(lambda: (cp.min(f), cp.max(f))), 4 * n)
        row("cupy.cumsum uint32", n, median_ms(lambda: cp.cumsum(u, dtype=cp.uint32)), 8 * n)
        if torch:
            tb = torch.as_tensor(b, device="cuda")
            tf = torch.as_tensor(f, device="cuda")
            tu = torch.as_tensor(u.view(cp.int32), device="cuda")
            row("torch.bincount uint8", n, median_ms(lambda: torch.bincount(tb, minlength=256)), n)
            row("torch.sum float32", n, median_ms(lambda: torch.sum(tf)), 4 * n)
            row("torch.aminmax float32", n, median_ms(lambda: torch.aminmax(tf)), 4 * n)
            row("torch.cumsum int32", n, median_ms(lambda: torch.cumsum(tu, 0, dtype=torch.int32)), 8 * n)
    for side in (1024, 4096, 8192):
        m = cp.asarray(rng.uniform(-1, 1, (side, side)).astype(np.float32))
        row(f"cupy.ascontiguousarray(m.T) {side}²", side * side, median_ms(lambda: cp.ascontiguousarray(m.T)), 8 * side * side)
        if torch:
            tm = torch.as_tensor(m, device="cuda")
            row(f"torch .t().contiguous() {side}²", side * side, median_ms(lambda: tm.t().contiguous()), 8 * side * side)
    big = cp.empty(1 << 28, dtype=cp.float32)
    dst = cp.empty_like(big)
    row("copy (device to device)", big.size, median_ms(lambda: cp.copyto(dst, big), runs=20), 8 * big.size)


if __name__ == "__main__":
    main()
