"""Usage: python3 gemm_peers.py. Peers for the reconstruction out = (U·s)·Vᵀ: cuBLAS through PyTorch in FP32, TF32 and FP16, event-timed
medians of 50 after 10 warm-ups, with the max relative error against an f64 product (|Δ|max / |out|max)."""
import sys, torch
torch.manual_seed(1)
def med(f, runs=50):
    for _ in range(10): f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts)//2]
print("| size | k | cuBLAS FP32 ms | TF32 ms | FP16 ms | err FP32 | err TF32 | err FP16 |")
print("|---|---|---|---|---|---|---|---|")
for n, k in [(1024,64),(1024,256),(4096,64),(4096,256),(4096,1024),(8192,256),(8192,1024)]:
    U = torch.randn(n, k, device="cuda"); s = torch.rand(k, device="cuda") + 0.5; V = torch.randn(n, k, device="cuda")
    ref = (U.double() * s.double()) @ V.double().T
    scale = ref.abs().max().item()
    row = []; errs = []
    for mode in ("fp32", "tf32", "fp16"):
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        if mode == "fp16":
            A, B = (U * s).half(), V.half()
            f = lambda: A @ B.T
        else:
            A = U * s
            f = lambda: A @ V.T
        row.append(med(f)); errs.append(((f().double() - ref).abs().max().item()) / scale)
    print(f"| {n}² | {k} | {row[0]:.4f} | {row[1]:.4f} | {row[2]:.4f} | {errs[0]:.1e} | {errs[1]:.1e} | {errs[2]:.1e} |")
    del U, V, ref
