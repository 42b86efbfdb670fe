"""`kernel_suite.svd` (an exact truncated SVD of any matrix) against its peers in one process on
the GPU machine: `torch.linalg.svd` (float32 and float64), `torch.svd_lowrank` (with its error),
`cupy.linalg.svd` and, on the CPU, scikit-learn's `randomized_svd` where they are installed.

Usage (the bundle's wheel on PYTHONPATH; see docs/benchmarks/truncated-svd.md):
    python3 truncated_svd_bench.py [--quick] [--only SUBSTRING] [--slow-peers]

Matrices: `Q₁·diag(σ)·Q₂ᵀ` built on the GPU in float64 (seeded Gaussian matrices made orthonormal by
`torch.linalg.qr`), with σᵢ = 1/(i + 1) (a data matrix's slowly decaying spectrum) down to
σ_r = 1/r, so the exact singular values are known; float32 cases round that matrix. Shapes
(issue 54): 100 000 × 512 (k = 10, 50), 4096 × 11008 (k = 64, 256), 8192 × 8192 (k = 100), a batch
of 64 × 1024 × 256 (k = 16); each in float64 and float32.

Columns: ms = CUDA events around one call, median of `runs` after a warm-up (the GPU waits for the
host between calls, so host work shows); max |Δσ|/σ₁ against the constructed σ (the matrix's own
rounding, ε·σ₁, included); for kernel_suite also max |UᵀU − I| and max ‖A·vᵢ − σᵢ·uᵢ‖/σ₁. The
speed-up columns: torch.linalg.svd f64 over ours, and ours over svd_lowrank. Peers that take longer
than 20 s a call run once (and `torch.linalg.svd` of 8192² float64 and scikit-learn only with
`--slow-peers`).
"""

import argparse
import statistics
import time

import numpy as np
import torch

import kernel_suite as ks

CASES = [
    ((100_000, 512), 10),
    ((100_000, 512), 50),
    ((4096, 11008), 64),
    ((4096, 11008), 256),
    ((8192, 8192), 100),
    ((64, 1024, 256), 16),
]


def timed(fn, runs):
    """(median ms, result of the last call) of `fn` between CUDA events after one warm-up call; a
    call of more than 20 s is timed once."""
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    if time.perf_counter() - start > 20:
        runs = 1
    times = []
    for _ in range(runs):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        result = fn()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times), result


def known_spectrum(shape, seed=54):
    """A float64 GPU tensor of `shape` (… × m × n) with singular values 1/(i + 1), and those values."""
    *lead, m, n = shape
    r = min(m, n)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q1, _ = torch.linalg.qr(torch.randn(*lead, m, r, device="cuda", dtype=torch.float64, generator=gen))
    q2, _ = torch.linalg.qr(torch.randn(*lead, n, r, device="cuda", dtype=torch.float64, generator=gen))
    sigma = 1.0 / torch.arange(1, r + 1, device="cuda", dtype=torch.float64)
    a = (q1 * sigma) @ q2.transpose(-1, -2)
    del q1, q2
    return a, sigma


def sigma_error(s, sigma, k):
    """max |Δσ|/σ₁ of the first k values over the batch."""
    s = torch.as_tensor(s).to("cuda", torch.float64)[..., :k]
    return ((s - sigma[:k]).abs().amax() / sigma[0]).item()


def quality(a, u, s, vt):
    """(max |UᵀU − I|, max ‖A·vᵢ − σᵢ·uᵢ‖/σ₁) in float64."""
    u, s, vt = (torch.as_tensor(x).double() for x in (u, s, vt))
    k = s.shape[-1]
    eye = torch.eye(k, device="cuda", dtype=torch.float64)
    orth = (u.transpose(-1, -2) @ u - eye).abs().amax().item()
    residual = torch.linalg.vector_norm(a @ vt.transpose(-1, -2) - u * s[..., None, :], dim=-2)
    return orth, (residual.amax() / torch.linalg.matrix_norm(a, ord=2).amax()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one timed run per call (default 5)")
    parser.add_argument("--only", help="only the cases whose label contains this")
    parser.add_argument("--slow-peers", action="store_true", help="also torch.linalg.svd f64 of 8192² and scikit-learn")
    args = parser.parse_args()
    runs = 1 if args.quick else 5
    try:
        import cupy
    except ImportError:
        cupy = None
    try:
        from sklearn.utils.extmath import randomized_svd
    except ImportError:
        randomized_svd = None
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cupy {getattr(cupy, '__version__', '—')}")
    print("| shape | k | dtype | call | ms | max \\|Δσ\\|/σ₁ | notes |")
    print("|---|---|---|---|---|---|---|")
    for shape, k in CASES:
        label = " × ".join(str(side) for side in shape)
        if args.only and args.only not in label:
            continue
        a64, sigma = known_spectrum(shape)
        big = shape[-1] * shape[-2] >= 8192 * 8192
        for dtype in (torch.float64, torch.float32):
            name = str(dtype).removeprefix("torch.")
            a = a64.to(dtype)
            rows = []
            ms, (u, s, vt) = timed(lambda: ks.svd(a, k), runs)
            orth, residual = quality(a64, u, s, vt)
            ours = ms
            rows.append(("**kernel_suite.svd**", ms, sigma_error(s, sigma, k), f"\\|UᵀU − I\\| {orth:.1e}, residual {residual:.1e}"))
            if dtype == torch.float32:
                ms, (u, s, vt) = timed(lambda: ks.svd(a, k, dtype="float64"), runs)
                rows.append(("kernel_suite.svd(dtype=float64)", ms, sigma_error(s, sigma, k), ""))
            if not (big and dtype == torch.float64 and not args.slow_peers):
                ms, (_, s, _) = timed(lambda: torch.linalg.svd(a, full_matrices=False), max(1, runs // 2))
                rows.append(("torch.linalg.svd", ms, sigma_error(s, sigma, k), f"{ms / ours:.1f}× ours"))
            ms, (_, s, _) = timed(lambda: torch.svd_lowrank(a, q=k + 10, niter=2), runs)
            rows.append(("torch.svd_lowrank(q=k+10, niter=2)", ms, sigma_error(s, sigma, k), f"ours {ours / ms:.2f}× its time"))
            if cupy is not None:
                ca = cupy.asarray(a)
                ms, (_, s, _) = timed(lambda: cupy.linalg.svd(ca, full_matrices=False), max(1, runs // 2))
                rows.append(("cupy.linalg.svd", ms, sigma_error(torch.as_tensor(s, device="cuda"), sigma, k), ""))
                del ca
            if randomized_svd is not None and args.slow_peers and len(shape) == 2:
                host = a.cpu().numpy()
                start = time.perf_counter()
                _, s, _ = randomized_svd(host, k, random_state=0)
                ms = (time.perf_counter() - start) * 1e3
                rows.append(("sklearn randomized_svd (CPU)", ms, sigma_error(torch.from_numpy(s.copy()), sigma, k), ""))
            for call, ms, error, notes in rows:
                print(f"| {label} | {k} | {name} | {call} | {ms:.2f} | {error:.1e} | {notes} |", flush=True)
            del a
        del a64
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
