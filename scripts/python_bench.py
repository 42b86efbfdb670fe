"""The kernel_suite package from Python on GPU arrays against its CuPy/PyTorch peers, in one run.

Usage: python3 scripts/python_bench.py [RUST_CONV_LOG RUST_LOMBSCARGLE_LOG]

For each case: *per call* = CUDA-event time around one call (median of 50 after 5 warm-ups; the
GPU waits for the host between calls, so the binding's host time shows), *in a loop* = events
around 50 back-to-back calls / 50, *host* = wall time of one call's Python return (no sync). The
Rust logs (`gpu-bundle/benches/conv`, `gpu-bundle/benches/lombscargle` of the same run) give the
same kernels launched from Rust. Prints a Markdown table.
"""

import statistics
import sys
import time

import cupy
import cupyx.scipy.ndimage
import numpy as np
import torch

import kernel_suite as ks

REPEATS, WARM = 50, 5


def timed(call, event, sync):
    """(per-call median ms, loop ms per call, host µs per call) of ``call``."""
    for _ in range(WARM):
        call()
    sync()
    per_call, host = [], []
    for _ in range(REPEATS):
        start, end = event(), event()
        start.record()
        t = time.perf_counter()
        call()
        host.append((time.perf_counter() - t) * 1e6)
        end.record()
        end.synchronize()
        per_call.append(elapsed(start, end))
    start, end = event(), event()
    start.record()
    for _ in range(REPEATS):
        call()
    end.record()
    end.synchronize()
    return statistics.median(per_call), elapsed(start, end) / REPEATS, statistics.median(host)


def elapsed(start, end):
    if isinstance(start, torch.cuda.Event):
        return start.elapsed_time(end)
    return cupy.cuda.get_elapsed_time(start, end)


torch_event = lambda: torch.cuda.Event(enable_timing=True)
cupy_event = cupy.cuda.Event
rows = []


def row(case, who, result, check):
    per_call, loop, host = result
    rows.append((case, who, per_call, loop, host, check))


def host(a):
    if isinstance(a, torch.Tensor):
        return a.cpu().numpy()
    return cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a


def relative(a, b):
    a, b = host(a).astype(np.float64), host(b).astype(np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


# Convolution: the Rust bench's shapes (13×13 mask).
rng = np.random.default_rng(1)
for side, dtype in [(4096, np.float32), (8192, np.float32), (4096, np.float64)]:
    image = rng.uniform(0, 1, (side, side)).astype(dtype)
    mask = rng.uniform(0, 1, (13, 13)).astype(dtype)
    mask /= mask.sum()
    case = f"convolve {side}² {np.dtype(dtype).name}, 13×13"
    t_image, t_mask = torch.from_numpy(image).cuda(), torch.from_numpy(mask).cuda()
    t_out = torch.empty_like(t_image)
    c_image, c_mask = cupy.asarray(image), cupy.asarray(mask)
    c_out = cupy.empty_like(c_image)
    reference = cupyx.scipy.ndimage.convolve(c_image.astype(cupy.float64), c_mask.astype(cupy.float64), mode="constant")
    ours = lambda: ks.convolve(t_image, t_mask, out=t_out)
    row(case, "kernel_suite (torch tensors, out=)", timed(ours, torch_event, torch.cuda.synchronize),
        relative(t_out, reference))
    ours_cupy = lambda: ks.convolve(c_image, c_mask, out=c_out)
    row(case, "kernel_suite (CuPy arrays, out=)", timed(ours_cupy, cupy_event, cupy.cuda.Device().synchronize),
        relative(c_out, reference))
    row(case, "kernel_suite (torch, result allocated)", timed(lambda: ks.convolve(t_image, t_mask), torch_event,
        torch.cuda.synchronize), float("nan"))
    peer = lambda: cupyx.scipy.ndimage.convolve(c_image, c_mask, output=c_out, mode="constant")
    row(case, "cupyx.scipy.ndimage.convolve (output=)", timed(peer, cupy_event, cupy.cuda.Device().synchronize),
        relative(c_out, reference))
    if dtype == np.float32:
        weight = torch.flip(t_mask, (0, 1))[None, None]
        conv2d = lambda: torch.nn.functional.conv2d(t_image[None, None], weight, padding=6)
        row(case, "torch.nn.functional.conv2d (cuDNN)", timed(conv2d, torch_event, torch.cuda.synchronize),
            relative(conv2d()[0, 0], reference))
    del t_image, t_out, c_image, c_out, reference
    torch.cuda.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()

# Lomb-Scargle: the Rust bench's default signal (103 samples × 2^20 angular frequencies), float64.
LOMBSCARGLE = cupy.RawKernel(r"""
extern "C" __global__ void lombscargle(const double* x, const double* y, const double* w, double* p,
                                       int n, int m) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < m; k += gridDim.x * blockDim.x) {
        double f = w[k], xc = 0, xs = 0, cc = 0, ss = 0, cs = 0;
        for (int j = 0; j < n; j++) {
            double s, c;
            sincos(f * x[j], &s, &c);
            xc += y[j] * c; xs += y[j] * s; cc += c * c; ss += s * s; cs += c * s;
        }
        double tau = atan2(2 * cs, cc - ss) / (2 * f), st, ct;
        sincos(f * tau, &st, &ct);
        double c_tau = ct * ct * cc + 2 * ct * st * cs + st * st * ss;
        double s_tau = ct * ct * ss - 2 * ct * st * cs + st * st * cc;
        double num1 = ct * xc + st * xs, num2 = ct * xs - st * xc;
        p[k] = 0.5 * ((c_tau != 0 ? num1 * num1 / c_tau : 0) + (s_tau != 0 ? num2 * num2 / s_tau : 0));
    }
}
""", "lombscargle")
# 103 of the 1024 candidate times, as many as the Rust bench's seed keeps.
keep = np.sort(np.random.default_rng(1).choice(1024, 103, replace=False))
x = np.linspace(0.01, 10 * np.pi, 1024)[keep]
y = 2 * np.cos(x + np.pi / 2)
freqs = np.linspace(0.01, 10, 1 << 20)
case = f"lombscargle {x.size} × 2^20 float64"
c_x, c_y, c_f = cupy.asarray(x), cupy.asarray(y), cupy.asarray(freqs)
c_p = cupy.empty_like(c_f)
ours = lambda: ks.lombscargle(c_x, c_y, c_f, out=c_p)
ours()
reference = cupy.asnumpy(c_p.copy())
row(case, "kernel_suite (CuPy arrays, out=)", timed(ours, cupy_event, cupy.cuda.Device().synchronize), 0.0)
t_x, t_y, t_f = (torch.from_numpy(a).cuda() for a in (x, y, freqs))
t_p = torch.empty_like(t_f)
row(case, "kernel_suite (torch tensors, out=)", timed(lambda: ks.lombscargle(t_x, t_y, t_f, out=t_p), torch_event,
    torch.cuda.synchronize), relative(t_p, reference))
raw = lambda: LOMBSCARGLE(((1 << 20) // 128,), (128,), (c_x, c_y, c_f, c_p, np.int32(x.size), np.int32(1 << 20)))
row(case, "CuPy RawKernel (one thread per frequency)", timed(raw, cupy_event, cupy.cuda.Device().synchronize),
    relative(c_p, reference))

# SVD of rank k, end to end: from NumPy (upload, factor, download) and on torch tensors (in place,
# factors allocated by torch); wall time with the GPU idle before each call, median of 5 after a
# warm-up; against torch.linalg.svd (cuSOLVER, all triplets, then truncated) of the same data.
# Then the reconstructions at several ranks from those factors, CUDA events, median of 20.
svd_rows, recon_rows = [], []
for count, side, k in [(1, 512, 50), (16, 512, 50), (64, 256, 20)]:
    images = np.random.default_rng(4).uniform(0, 1, (count, side, side)).astype(np.float32)
    t_images = torch.from_numpy(images).cuda()

    def peer_numpy():
        u, s, vt = torch.linalg.svd(torch.from_numpy(images).cuda(), full_matrices=False)
        return u[..., :k].cpu().numpy(), s[..., :k].double().cpu().numpy(), vt[..., :k, :].cpu().numpy()

    def peer_torch():
        u, s, vt = torch.linalg.svd(t_images, full_matrices=False)
        return u[..., :k], s[..., :k].double(), vt[..., :k, :]

    calls = [
        ("from NumPy", "kernel_suite.svd", lambda: ks.svd(images, k, device="gpu")),
        ("from NumPy", "torch.linalg.svd", peer_numpy),
        ("torch tensors", "kernel_suite.svd", lambda: ks.svd(t_images, k)),
        ("torch tensors", "torch.linalg.svd", peer_torch),
    ]
    exact = np.linalg.svd(images[0].astype(np.float64), compute_uv=False)[:k]
    for where, name, call in calls:
        call()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            u, sv, vt = call()
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t) * 1e3)
        deviation = float(np.abs(host(sv)[0] - exact).max() / exact[0])
        svd_rows.append((f"{count} × {side}², k = {k}", where, name, statistics.median(samples), deviation))
    u, sv, vt = ks.svd(t_images, k)
    ranks = [r for r in (1, 5, 10, 20, 50) if r <= k]
    sv32 = sv.float()
    ours = lambda: ks.reconstruct(u, sv32, vt, ranks)
    theirs = lambda: torch.stack([u[..., :r] @ (sv32[..., :r, None] * vt[..., :r, :]) for r in ranks], 1)
    want = theirs().double()
    for name, call in (("kernel_suite.reconstruct", ours), ("torch matmul per rank (FP32)", theirs)):
        per_call, loop, _ = timed(call, torch_event, torch.cuda.synchronize)
        deviation = float(((call().double() - want).abs().max() / want.abs().max()).item())
        recon_rows.append((f"{count} × {side}², ranks {ranks}", name, per_call, loop, deviation))
    del t_images, u, sv, vt, sv32, want
    torch.cuda.empty_cache()

# The binding's host cost per call, on problems too small for the GPU to matter: 2000 calls back to
# back, wall time per call (the launches queue; the GPU keeps up).
small = [
    ("convolve 64² float32, 3×3 (CuPy)", lambda a=cupy.ones((64, 64), cupy.float32), m=cupy.ones((3, 3), cupy.float32),
     o=cupy.empty((64, 64), cupy.float32): ks.convolve(a, m, out=o)),
    ("convolve 64² float32, 3×3 (torch)", lambda a=torch.ones(64, 64, device="cuda"), m=torch.ones(3, 3, device="cuda"),
     o=torch.empty(64, 64, device="cuda"): ks.convolve(a, m, out=o)),
    ("lombscargle 8 × 1024 (CuPy)", lambda v=cupy.linspace(1, 2, 8), f=cupy.linspace(1, 2, 1024), o=cupy.empty(1024):
     ks.lombscargle(v, v, f, out=o)),
    ("CuPy RawKernel lombscargle 8 × 1024", lambda v=cupy.linspace(1, 2, 8), f=cupy.linspace(1, 2, 1024),
     o=cupy.empty(1024): LOMBSCARGLE((8,), (128,), (v, v, f, o, np.int32(8), np.int32(1024)))),
    ("cupyx convolve 64² float32, 3×3", lambda a=cupy.ones((64, 64), cupy.float32), m=cupy.ones((3, 3), cupy.float32),
     o=cupy.empty((64, 64), cupy.float32): cupyx.scipy.ndimage.convolve(a, m, output=o, mode="constant")),
]
overhead = []
for name, call in small:
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(2000):
        call()
    overhead.append((name, (time.perf_counter() - t) / 2000 * 1e6))
    torch.cuda.synchronize()

print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cupy {cupy.__version__}")
print("| case | call | per call ms | in a loop ms/call | host µs/call | max rel. deviation |")
print("|---|---|---|---|---|---|")
for case, who, per_call, loop, host, check in rows:
    print(f"| {case} | {who} | {per_call:.4f} | {loop:.4f} | {host:.1f} | {check:.1e} |")
print("\n| SVD | arrays | call | ms end to end | max σ deviation / σ₁ (image 0, vs LAPACK f64) |")
print("|---|---|---|---|---|")
for case, where, name, ms, dev in svd_rows:
    print(f"| {case} | {where} | {name} | {ms:.2f} | {dev:.1e} |")
print("\n| reconstruction (torch tensors) | call | per call ms | in a loop ms/call | max rel. deviation |")
print("|---|---|---|---|---|")
for case, name, per_call, loop, dev in recon_rows:
    print(f"| {case} | {name} | {per_call:.4f} | {loop:.4f} | {dev:.1e} |")
print("\n| host cost of one call (2000 back to back, small problem) | µs/call |\n|---|---|")
for name, us in overhead:
    print(f"| {name} | {us:.1f} |")
import cProfile, pstats  # noqa: E401, E402
call = small[2][1]
profile = cProfile.Profile()
profile.enable()
for _ in range(2000):
    call()
profile.disable()
torch.cuda.synchronize()
pstats.Stats(profile).sort_stats("tottime").print_stats(12)
for log in sys.argv[1:]:
    print(f"\n--- {log} (the same kernels launched from Rust, same run)")
    print(open(log).read())
