"""The peer of the blocked Cholesky's component rows (`docs/benchmarks/cholesky.md`), on the GPU machine:
cuSOLVER's Cholesky factor and triangular inverse through torch (f64), `torch.linalg.cholesky` then
`solve_triangular` against the identity, for the Gram matrix of a random (2b + 9) × b basis, as
`benches/svd_factor --cholesky` factors. Event-timed median of 30 after 5 warm-ups. Run it in the same
call as the benchmark.

    python3 cholesky_peer.py
"""
import torch
def med(fn, runs=30, warm=5):
    for _ in range(warm): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts)//2]
torch.manual_seed(1)
for images, b in [(1, 320), (1, 384), (1, 512), (8, 512)]:
    x = torch.rand(images, 2*b+9, b, dtype=torch.float64, device="cuda")*2-1
    w = x.transpose(1, 2) @ x
    eye = torch.eye(b, dtype=torch.float64, device="cuda").expand(images, b, b)
    def chol_inv():
        l = torch.linalg.cholesky(w)
        return torch.linalg.solve_triangular(l, eye, upper=False)
    print(f"torch cholesky + triangular inverse {images} x {b}: {med(chol_inv):.4f} ms; cholesky alone {med(lambda: torch.linalg.cholesky(w)):.4f} ms")
