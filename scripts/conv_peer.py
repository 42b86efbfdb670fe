"""Usage: python3 conv_peer.py IMAGE.png MASK.txt OURS.npy. conv end to end as a CuPy user does it, and the check of our .npy against scipy.ndimage.convolve on the same input."""
import sys, time, numpy as np, cupy as cp, cupyx.scipy.ndimage as cnd, scipy.ndimage as nd
from PIL import Image
img = np.asarray(Image.open(sys.argv[1]).convert("L"), dtype=np.float32) / 255.0
mask = np.loadtxt(sys.argv[2], dtype=np.float32, ndmin=2)
ours = np.load(sys.argv[3])
print("ours .npy:", ours.dtype, ours.shape)
ref = nd.convolve(img.astype(np.float64), mask.astype(np.float64), mode="constant", cval=0.0)
print("max|ours - scipy f64| / max|scipy| = %.3e" % (np.abs(ours - ref).max() / np.abs(ref).max()))
cm = cp.asarray(mask)
for i in range(4):
    t = time.perf_counter(); d = cp.asarray(img); cp.cuda.Device().synchronize(); t1 = time.perf_counter()
    r = cnd.convolve(d, cm, mode="constant", cval=0.0); cp.cuda.Device().synchronize(); t2 = time.perf_counter()
    h = cp.asnumpy(r); t3 = time.perf_counter()
    print("cupy run %d: H2D %.2f ms, convolve %.3f ms, D2H %.2f ms, total %.2f ms" % (i, (t1-t)*1e3, (t2-t1)*1e3, (t3-t2)*1e3, (t3-t)*1e3))
