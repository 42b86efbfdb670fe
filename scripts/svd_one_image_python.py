"""`kernel_suite.svd` per call on one image against `torch.linalg.svd` and `torch.svd_lowrank(q=k+10, niter=2)`.

Usage (on the GPU machine, the bundle's wheel on PYTHONPATH; images from `svd-workload DIR --count 1 --size N`):
    python3 svd_one_image_python.py IMAGE_512 IMAGE_2048 IMAGE_4096

Torch tensors on the GPU (the image as floats in [0, 1]), CUDA events around one call (the GPU waits for
the host between calls, so the host's share shows), median and minimum of 10 after two warm-ups (3 for
`torch.linalg.svd`); ours checked against LAPACK's f64 singular values up to 2048². Cases: 512² at
k = 100, 512² of seeded uniform noise at k = 100 (a flat spectrum), 2048² at k = 50, 4096² at k = 100
and 256 (issue 51's single images).
"""

import statistics
import sys

import numpy as np
import torch
from PIL import Image

import kernel_suite as ks


def per_call(fn, runs=10):
    """Median and minimum ms of `fn` between two CUDA events."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times)


small, medium, large = sys.argv[1:4]


def load(path):
    """The image at `path` as floats in [0, 1] on the GPU."""
    return torch.from_numpy(np.asarray(Image.open(path), dtype=np.float32) / 255.0).cuda()


noise = torch.from_numpy(np.random.default_rng(0).random((512, 512), dtype=np.float32)).cuda()
for label, image, k in [
    ("", load(small), 100),
    (" noise", noise, 100),
    ("", load(medium), 50),
    ("", load(large), 100),
    ("", load(large), 256),
]:
    _, s, _ = ks.svd(image, k)
    accuracy = "—"
    if image.shape[0] <= 2048:
        exact = np.linalg.svd(image.double().cpu().numpy(), compute_uv=False)[:k]
        accuracy = f"{np.abs(s.cpu().numpy() - exact).max() / exact[0]:.1e}"
    for name, (median, least) in [
        ("kernel_suite.svd", per_call(lambda: ks.svd(image, k))),
        ("torch.linalg.svd", per_call(lambda: torch.linalg.svd(image, full_matrices=False), 3)),
        ("torch.svd_lowrank", per_call(lambda: torch.svd_lowrank(image, q=k + 10, niter=2))),
    ]:
        print(f"{tuple(image.shape)}{label} k={k:<4} {name:18s} median {median:8.2f} ms  min {least:8.2f}")
    print(f"{tuple(image.shape)}{label} k={k:<4} kernel_suite.svd max |Δσ|/σ₁ against LAPACK (f64): {accuracy}")
