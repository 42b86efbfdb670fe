#!/usr/bin/env python3
"""The `svd` job's peers on a folder of grayscale PNGs: NumPy, CuPy and PyTorch.

The job, as `svd DIR --ranks K1,K2,...` runs it: every image from disk to its rank-k reconstruction
for every k in host memory, with its relative Frobenius error. Each peer runs it on the same files:

* numpy:          np.linalg.svd(full_matrices=False) per image (LAPACK, all cores), float32
* cupy:           cp.linalg.svd per image (cuSOLVER), float32
* torch-batched:  torch.linalg.svd on each stack of same-size images (CUDA), float32
* torch-lowrank:  torch.svd_lowrank(q=k+10, niter=2) on each stack (approximate)

Timing: the PNGs are decoded once (Pillow) and that time is reported on its own ("load"); then for
each peer one untimed warm-up run, then the median of --runs timed runs of the job on the decoded
images (upload, SVD, reconstruction, error, copy back). Imports, CUDA context creation and warm-up
are excluded, as in the issue's table. Accuracy on the first image against NumPy float64:
max |σ_i - σ_i^ref| / σ_1 over i < k, and |error - Eckart-Young bound| / bound.

Usage: svd_peers.py DIR [--k 50 | --k 1,5,10] [--runs 3] [--json out.json] [--peers numpy,cupy,...]
"""
import argparse
import glob
import json
import os
import statistics
import time

import numpy as np


def load_folder(folder):
    from PIL import Image

    paths = sorted(glob.glob(os.path.join(folder, "*.png")))
    if not paths:
        raise SystemExit(f"error: {folder}: no PNG files")
    t = time.perf_counter()
    images = [np.asarray(Image.open(p).convert("L"), dtype=np.float32) / np.float32(255.0) for p in paths]
    return images, (time.perf_counter() - t) * 1e3


def groups(images):
    """Indices of the images, grouped by shape (for the batched peers)."""
    by_shape = {}
    for i, a in enumerate(images):
        by_shape.setdefault(a.shape, []).append(i)
    return list(by_shape.values())


def job_numpy(images, ks):
    out = []
    for a in images:
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        for k in ks:
            rec = (u[:, :k] * s[:k]) @ vt[:k]
            err = np.linalg.norm(a - rec) / np.linalg.norm(a)
        out.append((rec, s[:k], err))
    return out


def job_cupy(images, ks):
    import cupy as cp

    out = []
    for a in images:
        d = cp.asarray(a)
        u, s, vt = cp.linalg.svd(d, full_matrices=False)
        for k in ks:
            rec = (u[:, :k] * s[:k]) @ vt[:k]
            err = cp.linalg.norm(d - rec) / cp.linalg.norm(d)
            host = cp.asnumpy(rec)
        out.append((host, cp.asnumpy(s[:k]), float(err)))
    return out


def job_torch(images, ks, lowrank):
    import torch

    out = [None] * len(images)
    for idx in groups(images):
        d = torch.from_numpy(np.stack([images[i] for i in idx])).cuda()
        if lowrank:
            u, s, v = torch.svd_lowrank(d, q=min(max(ks) + 10, min(d.shape[-2:])), niter=2)
            vh = v.transpose(-2, -1)
        else:
            u, s, vh = torch.linalg.svd(d, full_matrices=False)
        for k in ks:
            rec = (u[..., :k] * s[..., None, :k]) @ vh[..., :k, :]
            err = torch.linalg.norm(d - rec, dim=(-2, -1)) / torch.linalg.norm(d, dim=(-2, -1))
            host = rec.cpu().numpy()
        rec, s, err = host, s[..., :k].cpu().numpy(), err.cpu().numpy()
        for j, i in enumerate(idx):
            out[i] = (rec[j], s[j], float(err[j]))
    torch.cuda.synchronize()
    return out


PEERS = {
    "numpy": job_numpy,
    "cupy": job_cupy,
    "torch-batched": lambda images, ks: job_torch(images, ks, lowrank=False),
    "torch-lowrank": lambda images, ks: job_torch(images, ks, lowrank=True),
}


def available(name):
    try:
        if name == "cupy":
            import cupy  # noqa: F401
        elif name.startswith("torch"):
            import torch

            if not torch.cuda.is_available():
                return "torch has no CUDA device"
        return None
    except ImportError as e:
        return str(e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--k", default="50", help="rank, or ranks separated by commas (the largest is checked)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--peers", default=",".join(PEERS))
    args = ap.parse_args()

    images, load_ms = load_folder(args.dir)
    ks = sorted({int(v) for v in args.k.split(",")})
    k = ks[-1]
    shapes = sorted({a.shape for a in images})
    print(f"{args.dir}: {len(images)} images {shapes}, ranks {ks}; load (Pillow, one core) {load_ms:.1f} ms")
    ref = np.linalg.svd(images[0].astype(np.float64), compute_uv=False)
    ref_bound = np.sqrt(np.sum(ref[k:] ** 2)) / np.sqrt(np.sum(ref**2))
    report = {"dir": args.dir, "images": len(images), "k": k, "load_ms": load_ms, "peers": {}}
    print(f"{'peer':>14} {'median ms':>10} {'min ms':>9} {'max |Δσ|/σ₁':>12} {'|err-EY|/EY':>12}")
    for name in args.peers.split(","):
        why = available(name)
        if why:
            print(f"{name:>14}  skipped: {why}")
            report["peers"][name] = {"skipped": why}
            continue
        job = PEERS[name]
        result = job(images, ks)  # warm-up
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            result = job(images, ks)
            times.append((time.perf_counter() - t) * 1e3)
        rec, s, err = result[0]
        ds = float(np.max(np.abs(np.asarray(s, dtype=np.float64) - ref[:k])) / ref[0])
        dev = float(abs(err - ref_bound) / ref_bound) if ref_bound > 0 else float(err)
        med = statistics.median(times)
        print(f"{name:>14} {med:10.1f} {min(times):9.1f} {ds:12.1e} {dev:12.1e}")
        report["peers"][name] = {
            "median_ms": med,
            "min_ms": min(times),
            "runs_ms": times,
            "max_sigma_error_rel": ds,
            "error_vs_bound_rel": dev,
        }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
