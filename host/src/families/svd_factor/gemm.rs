//! The batched f64 GEMMs of the iteration (`kernels::svd_factor`'s tiled kernels, on the f64
//! tensor cores on a GPU): operands read through a [`Layout`](kernels::svd_factor::Layout)
//! (transposed, strided, per image), their spans checked before a launch.

use crate::launch::device::{Buffer, BufferView, BufferViewMut, Device, Element};
use crate::launch::error::{Result, ensure};
use crate::launch::profile::Work;
use gpu_std::sim::{Dim3, LaunchConfig};
use gpu_std::{KernelFn, Slice, SliceMut};
use kernels::svd_factor::{self as kf, Layout};
use std::cell::RefCell;

/// Launch configuration of the GEMM kernels for an `m × n` result over `images`.
fn gemm_config(m: usize, n: usize, images: usize) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3 {
            x: n.div_ceil(kf::GEMM_TILE as usize) as u32,
            y: m.div_ceil(kf::GEMM_TILE as usize) as u32,
            z: images as u32,
        },
        block: Dim3::x(kf::GEMM_THREADS),
        shared_bytes: kf::GEMM_SHARED_BYTES,
    }
}

/// One operand of a batched GEMM: the buffer (or part of one) and the layout it is read through.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    data: BufferView<'a, f64>,
    layout: Layout,
}

/// The operand `data` read through `layout`.
pub(super) fn operand(data: BufferView<'_, f64>, layout: Layout) -> Operand<'_> {
    Operand { data, layout }
}

/// Checks that `len` elements hold `images` `rows × cols` matrices through `layout` (the span from
/// the first element to the last), which the GEMM kernels index without checks.
fn check_span(
    what: &str,
    len: usize,
    layout: Layout,
    (rows, cols): (usize, usize),
    images: usize,
) -> Result<()> {
    let span = (images - 1) * layout.batch as usize
        + (rows - 1) * layout.row as usize
        + (cols - 1) * layout.col as usize
        + 1;
    ensure(span <= len, || {
        format!(
            "GEMM {what}: {images} matrices of {rows} × {cols} span {span} elements; the buffer holds {len}"
        )
    })
}

/// A GEMM result type and its kernels: the 64 × 64 tensor-core and FMA ones, the pipelined ones
/// and the split-K sum.
pub(super) trait GemmResult: Element + 'static {
    /// [`kf::gemm_f64_mma_to`] for this type.
    const MMA: &'static KernelFn<GemmArgs<Self>>;
    /// [`kf::gemm_f64_to`] for this type.
    const FMA: &'static KernelFn<GemmArgs<Self>>;
    /// [`kf::gemm_f64_pipelined_to`] for this type.
    const PIPELINED: &'static KernelFn<PipelinedArgs<Self>>;
    /// [`kf::gemm_f64_pipelined_wide_to`] for this type.
    const PIPELINED_WIDE: &'static KernelFn<PipelinedArgs<Self>>;
    /// [`kf::gemm_f64_split_sum_to`] for this type.
    const SPLIT_SUM: &'static KernelFn<SplitSumArgs<Self>>;
}

impl GemmResult for f64 {
    const MMA: &'static KernelFn<GemmArgs<f64>> = &kf::GEMM_F64_MMA_TO_F64;
    const FMA: &'static KernelFn<GemmArgs<f64>> = &kf::GEMM_F64_TO_F64;
    const PIPELINED: &'static KernelFn<PipelinedArgs<f64>> = &kf::GEMM_F64_PIPELINED_TO_F64;
    const PIPELINED_WIDE: &'static KernelFn<PipelinedArgs<f64>> = &kf::GEMM_F64_PIPELINED_WIDE_TO_F64;
    const SPLIT_SUM: &'static KernelFn<SplitSumArgs<f64>> = &kf::GEMM_F64_SPLIT_SUM_TO_F64;
}

impl GemmResult for f32 {
    const MMA: &'static KernelFn<GemmArgs<f32>> = &kf::GEMM_F64_MMA_TO_F32;
    const FMA: &'static KernelFn<GemmArgs<f32>> = &kf::GEMM_F64_TO_F32;
    const PIPELINED: &'static KernelFn<PipelinedArgs<f32>> = &kf::GEMM_F64_PIPELINED_TO_F32;
    const PIPELINED_WIDE: &'static KernelFn<PipelinedArgs<f32>> = &kf::GEMM_F64_PIPELINED_WIDE_TO_F32;
    const SPLIT_SUM: &'static KernelFn<SplitSumArgs<f32>> = &kf::GEMM_F64_SPLIT_SUM_TO_F32;
}

/// Most images of a batch whose products of fewer than 2²⁵ multiply-adds each still run on the
/// pipelined kernels ([`Gemms`]).
const PIPELINED_SMALL_BATCH: usize = 4;

/// The inner dimension from which a small batch's products, however small, run on the pipelined
/// kernels split along it ([`kf::pgemm_splits`]: parts of at least 128): on one image of
/// 100 000 × 512 at `k = 10` (H200), `G·Q` (512 × 32 × 512) took 80 µs and `QᵀQ` (32 × 32 × 512)
/// 62 µs on the 64 × 64 kernel, 8 blocks and 1.
const SPLIT_K_MIN_INNER: usize = 256;

/// The batched GEMMs of one factorisation: on the device's queue, over the plan's images, on the
/// f64 tensor cores where the plan says — the pipelined kernels ([`kf::gemm_f64_pipelined_to`],
/// [`kf::gemm_f64_pipelined_wide_to`], split-K where the tiles do not fill the GPU) for all but the
/// smallest products, [`kf::gemm_f64_mma_to`] for those — else the FMA kernels, whose results agree
/// to rounding (the simulator runs those, since it simulates a warp's `mma` through
/// a gather of all its lanes; the tensor-core kernels are tested there on their own).
pub(super) struct Gemms<'a> {
    device: &'a Device,
    images: usize,
    tensor_cores: bool,
    split_parts: RefCell<SplitParts>,
}

/// The split-K products' partial sums: one buffer, reused by every product on the device's queue
/// (in order, so a product's sum has read it before the next one's parts write it) and replaced by
/// a larger one where a product needs more. Buffers of its own rather than stream-ordered ones:
/// the first stream-ordered allocations of a process grow the pool, which cost a cold one-image
/// job 10.7 ms in 18 calls on an H100 (`docs/benchmarks/svd-job.md`).
#[derive(Default)]
struct SplitParts {
    current: Option<Buffer<f64>>,
    /// Smaller buffers replaced while queued work may still read them; freed with the `Gemms`.
    replaced: Vec<Buffer<f64>>,
}

impl<'a> Gemms<'a> {
    /// The GEMMs of a batch of `images` on `device`, on the tensor cores if `tensor_cores`.
    pub(super) fn new(device: &'a Device, images: usize, tensor_cores: bool) -> Self {
        Gemms { device, images, tensor_cores, split_parts: RefCell::default() }
    }

    /// Runs `use_parts` with the split-K buffer, made at least `len` values long.
    fn with_split_parts<R>(
        &self,
        len: usize,
        use_parts: impl FnOnce(&mut Buffer<f64>) -> Result<R>,
    ) -> Result<R> {
        let mut parts = self.split_parts.borrow_mut();
        let buffer = match parts.current.take() {
            Some(buffer) if buffer.len() >= len => buffer,
            smaller => {
                parts.replaced.extend(smaller);
                self.device.alloc_temporary::<f64>(self.device.queue(), len)?
            }
        };
        use_parts(parts.current.insert(buffer))
    }

    /// `C = A·B·diag(scale)` for every image (`m × n` result, inner dimension `k`), in `T` (f64,
    /// or f32 for the reconstruction's factors); `scale` is `n` values per image, its stride apart.
    /// Only the upper triangle of blocks is computed and mirrored when `symmetric`.
    ///
    /// # Safety
    /// The buffers must live until the queue reaches the launch (as for [`Device::launch_on`]).
    pub(super) unsafe fn product<T: GemmResult>(
        &self,
        operands: (Operand, Operand),
        c: (BufferViewMut<T>, Layout),
        scale: Option<(BufferView<f64>, u32)>,
        dims: (usize, usize, usize),
        symmetric: bool,
    ) -> Result<()> {
        if self.pipelined(dims) {
            let kernel =
                if kf::pgemm_wide(dims.0 as u32, dims.1 as u32) { T::PIPELINED_WIDE } else { T::PIPELINED };
            // SAFETY: forwarded from the caller.
            return unsafe {
                self.launch_pipelined((kernel, T::SPLIT_SUM), operands, c, scale, dims, symmetric)
            };
        }
        let kernel = if self.tensor_cores { T::MMA } else { T::FMA };
        // SAFETY: forwarded from the caller.
        unsafe { self.launch(kernel, operands, c, scale, dims, symmetric) }
    }

    /// Whether an `m × n × k` product runs on the pipelined tensor-core kernel
    /// ([`kf::gemm_f64_pipelined_to`]): on the tensor cores, for products of at least 2²⁵
    /// multiply-adds per image, and over a batch of at most [`PIPELINED_SMALL_BATCH`] images for
    /// those of at least 2²⁴ in all or with an inner dimension of at least [`SPLIT_K_MIN_INNER`]
    /// (split there, where the 64 × 64 kernel has a few blocks walk the whole inner dimension);
    /// the rest keep the 64 × 64 kernel, whose smaller tiles give a batch of small products more
    /// blocks (64 × 256² at k = 50 took 49 ms on the pipelined kernels against 40 on the 64 × 64
    /// one: `docs/benchmarks/gemm.md`).
    fn pipelined(&self, (m, n, k): (usize, usize, usize)) -> bool {
        let per_image = m * n * k;
        let small_batch = self.images <= PIPELINED_SMALL_BATCH;
        self.tensor_cores
            && (per_image >= 1 << 25
                || (small_batch && (per_image * self.images >= 1 << 24 || k >= SPLIT_K_MIN_INNER)))
    }

    /// A GEMM on a pipelined tensor-core kernel (`kernels.0`: [`kf::gemm_f64_pipelined_to`] or,
    /// where [`kf::pgemm_wide`] says, [`kf::gemm_f64_pipelined_wide_to`]), its inner dimension
    /// split over [`kf::pgemm_splits`] parts where the tiles alone do not fill the GPU: then the
    /// parts go to a temporary buffer (stream-ordered) and `kernels.1` adds them, scales,
    /// converts and mirrors.
    ///
    /// # Safety
    /// As for [`Gemms::product`].
    unsafe fn launch_pipelined<T: Element>(
        &self,
        (kernel, sum): (&KernelFn<PipelinedArgs<T>>, &KernelFn<SplitSumArgs<T>>),
        (a, b): (Operand, Operand),
        (c, c_layout): (BufferViewMut<T>, Layout),
        scale: Option<(BufferView<f64>, u32)>,
        (m, n, k): (usize, usize, usize),
        symmetric: bool,
    ) -> Result<()> {
        let (images, device) = (self.images, self.device);
        let scale_stride = self.check_operands((a, b), (c.len(), c_layout), scale, (m, n, k))?;
        let wide = kf::pgemm_wide(m as u32, n as u32);
        let (bn, threads, shared_bytes) = if wide {
            (kf::PGEMM_WIDE_TILE_N, kf::PGEMM_WIDE_THREADS, kf::PGEMM_WIDE_SHARED_BYTES)
        } else {
            (kf::PGEMM_TILE_N, kf::PGEMM_THREADS, kf::PGEMM_SHARED_BYTES)
        };
        let sms = device.multiprocessors()?;
        let splits = kf::pgemm_splits(m as u32, n as u32, k as u32, images as u32, symmetric, sms, bn);
        let config = |parts: usize| LaunchConfig {
            grid: Dim3 {
                x: n.div_ceil(bn as usize) as u32,
                y: m.div_ceil(kf::PGEMM_TILE_M as usize) as u32,
                z: (images * parts) as u32,
            },
            block: Dim3::x(threads),
            shared_bytes,
        };
        let work = Some(gemm_work(m, n, k, images, symmetric));
        let dims = (m as u32, n as u32, k as u32);
        if splits <= 1 {
            let args = (
                a.data,
                a.layout,
                b.data,
                b.layout,
                c,
                c_layout,
                scale.map(|(values, _)| values),
                scale_stride,
                dims.0,
                dims.1,
                dims.2,
                kf::pgemm_mode(symmetric, 1),
            );
            // SAFETY: forwarded from the caller; the layouts lie inside their buffers (checked
            // above); one block per tile and image.
            return unsafe { device.launch_counted(device.queue(), kernel, config(1), args, work) };
        }
        let parts = splits as usize;
        let len = parts * images * m * n;
        let part_layout = Layout::row_major(n as u32, (m * n) as u32);
        let part_kernel =
            if wide { &kf::GEMM_F64_PIPELINED_WIDE_TO_F64 } else { &kf::GEMM_F64_PIPELINED_TO_F64 };
        self.with_split_parts(len, |partial| {
            let none: Option<BufferView<f64>> = None;
            let args = (
                a.data,
                a.layout,
                b.data,
                b.layout,
                partial.view_mut(..len)?,
                part_layout,
                none,
                0,
                dims.0,
                dims.1,
                dims.2,
                kf::pgemm_mode(symmetric, splits),
            );
            // SAFETY: as above; the parts fill the first `len` values of `partial` (`parts · images`
            // matrices of m × n), which no other work on the queue touches before the sum below.
            unsafe { device.launch_counted(device.queue(), part_kernel, config(parts), args, work)? };
            // SAFETY: `partial` holds the parts (written above, in the queue's order); C's span was
            // checked above.
            unsafe {
                self.sum_parts(
                    sum,
                    (partial.view(..len)?, splits),
                    (c, c_layout),
                    (scale, scale_stride),
                    (m, n),
                    symmetric,
                )
            }
        })
    }

    /// The split-K sum: C = (Σ of the `splits` parts in `partial`)·diag(scale), mirrored when
    /// `symmetric` ([`kf::gemm_f64_split_sum_to`]: each block's warps share the parts).
    ///
    /// # Safety
    /// As for [`Gemms::product`]; `partial` holds `splits · images` matrices of `m × n` and C's
    /// span is checked.
    unsafe fn sum_parts<T: Element>(
        &self,
        sum: &KernelFn<SplitSumArgs<T>>,
        (partial, splits): (BufferView<f64>, u32),
        (c, c_layout): (BufferViewMut<T>, Layout),
        (scale, scale_stride): (Option<(BufferView<f64>, u32)>, u32),
        (m, n): (usize, usize),
        symmetric: bool,
    ) -> Result<()> {
        let config = LaunchConfig {
            grid: Dim3 { x: kf::split_sum_blocks(m as u32, n as u32), y: 1, z: self.images as u32 },
            block: Dim3::x(kf::SPLIT_SUM_THREADS),
            shared_bytes: kf::SPLIT_SUM_SHARED_BYTES,
        };
        let args = (
            partial,
            splits,
            c,
            c_layout,
            scale.map(|(values, _)| values),
            scale_stride,
            m as u32,
            n as u32,
            symmetric as u32,
        );
        // SAFETY: forwarded from the caller; the kernel reads `partial` and writes C inside its
        // checked span.
        unsafe { self.device.launch_counted(self.device.queue(), sum, config, args, None) }
    }

    /// Checks that every operand's layout lies inside its buffer (the kernels index without
    /// checks) for an `m × n × k` product over the batch; returns the scale's stride (0 without).
    fn check_operands(
        &self,
        (a, b): (Operand, Operand),
        (c_len, c_layout): (usize, Layout),
        scale: Option<(BufferView<f64>, u32)>,
        (m, n, k): (usize, usize, usize),
    ) -> Result<u32> {
        let images = self.images;
        check_span("A", a.data.len(), a.layout, (m, k), images)?;
        check_span("B", b.data.len(), b.layout, (k, n), images)?;
        check_span("C", c_len, c_layout, (m, n), images)?;
        Ok(match scale {
            Some((values, stride)) => {
                check_span("scale", values.len(), Layout::row_major(1, stride), (1, n), images)?;
                stride
            }
            None => 0,
        })
    }

    /// A GEMM with the result type of `kernel`; every operand's layout checked against its buffer.
    ///
    /// # Safety
    /// As for [`Gemms::product`].
    unsafe fn launch<T: Element>(
        &self,
        kernel: &KernelFn<GemmArgs<T>>,
        (a, b): (Operand, Operand),
        (c, c_layout): (BufferViewMut<T>, Layout),
        scale: Option<(BufferView<f64>, u32)>,
        (m, n, k): (usize, usize, usize),
        symmetric: bool,
    ) -> Result<()> {
        let images = self.images;
        let scale_stride = self.check_operands((a, b), (c.len(), c_layout), scale, (m, n, k))?;
        let work = gemm_work(m, n, k, images, symmetric);
        let args = (
            a.data,
            a.layout,
            b.data,
            b.layout,
            c,
            c_layout,
            scale.map(|(values, _)| values),
            scale_stride,
            m as u32,
            n as u32,
            k as u32,
            symmetric as u32,
        );
        // SAFETY: forwarded from the caller; the layouts lie inside their buffers (checked above);
        // one thread block per 64 × 64 tile and image.
        unsafe {
            self.device.launch_counted(
                self.device.queue(),
                kernel,
                gemm_config(m, n, images),
                args,
                Some(work),
            )
        }
    }
}

/// The argument tuple of [`kf::gemm_f64_pipelined_to`] with result type `T`.
type PipelinedArgs<T> =
    (Slice<f64>, Layout, Slice<f64>, Layout, SliceMut<T>, Layout, Slice<f64>, u32, u32, u32, u32, u32);

/// The argument tuple of [`kf::gemm_f64_split_sum_to`] with result type `T`.
type SplitSumArgs<T> = (Slice<f64>, u32, SliceMut<T>, Layout, Slice<f64>, u32, u32, u32, u32);

/// The argument tuple of the GEMM kernels with result type `T`.
type GemmArgs<T> =
    (Slice<f64>, Layout, Slice<f64>, Layout, SliceMut<T>, Layout, Slice<f64>, u32, u32, u32, u32, u32);

fn gemm_work(m: usize, n: usize, k: usize, images: usize, symmetric: bool) -> Work {
    let half = if symmetric { 0.5 } else { 1.0 };
    Work {
        bytes: images as f64 * 8.0 * (m * k + k * n + m * n) as f64 * half,
        flops: images as f64 * 2.0 * (m * n * k) as f64 * half,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Gemms` on the tensor cores in the simulator, for products large enough for the pipelined
    /// kernels: a symmetric one split in parts (the simulator's 4 multiprocessors), and a wide
    /// f32 one with column scales and a transposed result, against exact integer products.
    #[test]
    fn the_pipelined_launches_give_exact_products() -> Result<()> {
        let device = Device::simulator();
        device.set_poison_allocations(true);
        let gemms = Gemms::new(&device, 1, true);
        let ints = |len: usize, seed: usize| -> Vec<f64> {
            (0..len).map(|e| ((e * 7 + seed * 13) % 11) as f64 - 5.0).collect()
        };

        // QᵀQ of a 1024 × 130 Q (row-major, rows of 130): 130 × 130, inner 1024, symmetric.
        let (b, r) = (130usize, 1024usize);
        assert!(gemms.pipelined((b, b, r)) && !kf::pgemm_wide(b as u32, b as u32));
        assert!(kf::pgemm_splits(b as u32, b as u32, r as u32, 1, true, 4, kf::PGEMM_TILE_N) > 1);
        let q = device.upload(&ints(r * b, 1))?;
        let lq = Layout::row_major(b as u32, (r * b) as u32);
        let mut gram = device.alloc::<f64>(b * b)?;
        let operands = (operand(q.view(..)?, lq.transposed()), operand(q.view(..)?, lq));
        let lg = Layout::row_major(b as u32, (b * b) as u32);
        // SAFETY: the buffers outlive the download, which waits for the queue.
        unsafe { gemms.product(operands, (gram.view_mut(..)?, lg), None, (b, b, r), true)? };
        let (q_host, got) = (device.download(&q)?, device.download(&gram)?);
        for i in 0..b {
            for j in 0..b {
                let want: f64 = (0..r).map(|p| q_host[p * b + i] * q_host[p * b + j]).sum();
                assert_eq!(got[i * b + j], want, "QᵀQ ({i}, {j})");
            }
        }

        // A 300 × 256 · 256 × 256 product (A row-major, B row-major), scaled columns, stored
        // transposed as f32.
        let (m, n, k) = (300usize, 256usize, 256usize);
        assert!(gemms.pipelined((m, n, k)) && kf::pgemm_wide(m as u32, n as u32));
        let (a, bm, scale) = (ints(m * k, 2), ints(k * n, 3), ints(n, 4));
        let (da, db, ds) = (device.upload(&a)?, device.upload(&bm)?, device.upload(&scale)?);
        let mut c = device.alloc::<f32>(m * n)?;
        let la = Layout::row_major(k as u32, (m * k) as u32);
        let lb = Layout::row_major(n as u32, (k * n) as u32);
        let lc = Layout::row_major(m as u32, (m * n) as u32).transposed();
        let operands = (operand(da.view(..)?, la), operand(db.view(..)?, lb));
        // SAFETY: as above.
        unsafe {
            gemms.product(
                operands,
                (c.view_mut(..)?, lc),
                Some((ds.view(..)?, n as u32)),
                (m, n, k),
                false,
            )?
        };
        let got = device.download(&c)?;
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| a[i * k + p] * bm[p * n + j]).sum::<f64>() * scale[j];
                assert_eq!(got[j * m + i], want as f32, "A·B ({i}, {j})");
            }
        }
        Ok(())
    }
}
