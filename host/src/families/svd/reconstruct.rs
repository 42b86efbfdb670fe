//! The reconstruction on the device: `A_k = (U[:, :k]·diag(s[:k]))·Vᵀ[:k, :]` in f32 by one of the
//! kernels of `kernels::svd` ([`Variant`]), one image ([`reconstruct`], [`launch_reconstruct`]) or
//! a batch in one launch ([`launch_reconstruct_batch`]), and the 8-bit quantisation of its output
//! for PNGs ([`launch_quantize_gray8`]).

use crate::launch::device::{Buffer, BufferView, BufferViewMut, Device, Queue};
use crate::launch::error::{Result, ensure};
use crate::launch::profile::Work;
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd as k;
use ndarray::Array2;

/// The reconstruction kernel to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// One thread per output element, operands from global memory.
    Naive,
    /// Square shared-memory tiles of the block's size (8, 16 or 32).
    Tiled,
    /// 128 × 128 tiles, 8 × 8 outputs per thread in registers (block size fixed at 16 × 16).
    Regtiled,
    /// Tensor cores, one TF32 pass (f32 accumulation, relative error ~1e-4): 128 × 128 tiles,
    /// 256 threads, 3-stage `cp.async` pipeline (block size ignored). Needs sm_80.
    Tf32,
    /// Tensor cores with 3xTF32 error compensation (f32-level accuracy), otherwise as `Tf32`.
    Tf32x3,
    /// As `Tf32`, through Hopper's asynchronous warpgroup MMA (`wgmma`, operands straight from
    /// shared memory). Needs an sm_90 GPU (H100, H200) running the embedded sm_90a cubin.
    #[value(name = "tf32-wgmma")]
    #[serde(rename = "tf32-wgmma")]
    Tf32Wgmma,
    /// As `Tf32x3` (f32-level accuracy), through `wgmma`; needs what `tf32-wgmma` needs.
    #[value(name = "tf32x3-wgmma")]
    #[serde(rename = "tf32x3-wgmma")]
    Tf32x3Wgmma,
}

/// Prepared ranks up to which `tf32-wgmma` always keeps its panel in registers
/// ([`k::svd_reconstruct_tf32_wgmma_register_panel`]; 10–25% faster there on the H100).
const REGISTER_PANEL_ALWAYS_K: u32 = 64;
/// Output tiles (128 × 128, all images) per SM from which `tf32-wgmma` keeps its panel in
/// registers up to [`k::REGISTER_PANEL_MAX_K`] too: on the H100 (132 SMs) at k = 128 that took 11%
/// off the call at 4096² (7.8 tiles per SM) and 20% at 8192², but added 22% at 1024² (0.5 per
/// SM: a block's fragments load before its only tile). 2048² (1.9 per SM) was not measured and
/// keeps the shared-memory panel.
const REGISTER_PANEL_MIN_TILES_PER_SM: usize = 4;

/// 128 × 128 tiles of an `m × n` output, as the panel kernels cut it.
fn output_tiles(m: usize, n: usize) -> usize {
    m.div_ceil(k::MMA_TILE_M as usize) * n.div_ceil(k::MMA_TILE_N as usize)
}

impl Variant {
    /// All variants, in order of sophistication.
    pub const ALL: [Variant; 7] = [
        Variant::Naive,
        Variant::Tiled,
        Variant::Regtiled,
        Variant::Tf32,
        Variant::Tf32x3,
        Variant::Tf32Wgmma,
        Variant::Tf32x3Wgmma,
    ];

    /// Name as used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Naive => "naive",
            Variant::Tiled => "tiled",
            Variant::Regtiled => "regtiled",
            Variant::Tf32 => "tf32",
            Variant::Tf32x3 => "tf32x3",
            Variant::Tf32Wgmma => "tf32-wgmma",
            Variant::Tf32x3Wgmma => "tf32x3-wgmma",
        }
    }

    /// Whether the launch's block size is the variant's own (the `block` argument is ignored).
    pub fn fixed_block(self) -> bool {
        !matches!(self, Variant::Naive | Variant::Tiled)
    }

    /// The block as reports name it: `8×8` for a block size, the fixed block and tile otherwise.
    pub fn block_label(self, block: u32) -> String {
        match self {
            Variant::Naive | Variant::Tiled => format!("{block}×{block}"),
            Variant::Regtiled => "16×16 (128² tile)".into(),
            Variant::Tf32 => format!("{} (128² tile)", k::MMA_TF32_THREADS),
            Variant::Tf32x3 => format!("{} (128² tile)", k::MMA_TF32X3_THREADS),
            Variant::Tf32Wgmma | Variant::Tf32x3Wgmma => format!("{} (128² tile)", k::WGMMA_THREADS),
        }
    }

    /// The launch for an `m × n` output with `block × block` threads (ignored by the variants with a
    /// [fixed block](Self::fixed_block)).
    pub fn launch_config(self, m: usize, n: usize, block: u32) -> LaunchConfig {
        match self {
            Variant::Naive => LaunchConfig::for_2d(n, m, block, block),
            Variant::Tiled => {
                LaunchConfig::for_2d(n, m, block, block).with_shared_bytes(2 * block * block * 4)
            }
            Variant::Regtiled => LaunchConfig {
                grid: Dim3::xy(
                    n.div_ceil(k::REG_TILE_N as usize) as u32,
                    m.div_ceil(k::REG_TILE_M as usize) as u32,
                ),
                block: Dim3::xy(16, k::REG_THREADS / 16),
                shared_bytes: k::REG_SHARED_BYTES,
            },
            Variant::Tf32 | Variant::Tf32x3 => LaunchConfig {
                grid: Dim3::xy(
                    n.div_ceil(k::MMA_TILE_N as usize) as u32,
                    m.div_ceil(k::MMA_TILE_M as usize) as u32,
                ),
                block: Dim3::x(if self == Variant::Tf32 {
                    k::MMA_TF32_THREADS
                } else {
                    k::MMA_TF32X3_THREADS
                }),
                shared_bytes: k::MMA_SHARED_BYTES,
            },
            Variant::Tf32Wgmma | Variant::Tf32x3Wgmma => LaunchConfig {
                grid: Dim3::xy(
                    n.div_ceil(k::MMA_TILE_N as usize) as u32,
                    m.div_ceil(k::MMA_TILE_M as usize) as u32,
                ),
                block: Dim3::x(k::WGMMA_THREADS),
                shared_bytes: if self == Variant::Tf32Wgmma {
                    k::WGMMA_TF32_SHARED_BYTES
                } else {
                    k::WGMMA_TF32X3_SHARED_BYTES
                },
            },
        }
    }

    /// Whether rank `k` runs on a panel kernel, which keeps each block's panel of `U·s`: one pass
    /// of `wgmma` up to [`k::PANEL_MAX_K`].
    fn uses_panel(self, k: usize) -> bool {
        self == Variant::Tf32Wgmma && k::prepared_row(k as u32) <= k::PANEL_MAX_K
    }

    /// Whether a launch of `tiles` 128 × 128 tiles of output (every image's) at rank `k` on a GPU
    /// of `sms` multiprocessors runs on [`k::svd_reconstruct_tf32_wgmma_register_panel`] (the panel
    /// in registers) rather than [`k::svd_reconstruct_tf32_wgmma_panel`] (in shared memory): always
    /// up to [`REGISTER_PANEL_ALWAYS_K`], and up to [`k::REGISTER_PANEL_MAX_K`] from
    /// [`REGISTER_PANEL_MIN_TILES_PER_SM`] tiles per SM.
    fn uses_register_panel(self, k: usize, tiles: usize, sms: usize) -> bool {
        let kp = k::prepared_row(k as u32);
        let many_tiles = tiles >= REGISTER_PANEL_MIN_TILES_PER_SM * sms;
        self.uses_panel(k) && (kp <= REGISTER_PANEL_ALWAYS_K || kp <= k::REGISTER_PANEL_MAX_K && many_tiles)
    }

    /// The kernel that computes the product of one `m × n` image at rank `k` on a GPU of `sms`
    /// multiprocessors (the `wgmma` variants launch [`k::tf32_prepare`] before it).
    pub fn kernel_name(self, (m, n, k): (usize, usize, usize), sms: usize) -> &'static str {
        match self {
            Variant::Naive => k::SVD_RECONSTRUCT_NAIVE.name(),
            Variant::Tiled => k::SVD_RECONSTRUCT_TILED.name(),
            Variant::Regtiled => k::SVD_RECONSTRUCT_REGTILED.name(),
            Variant::Tf32 => k::SVD_RECONSTRUCT_TF32.name(),
            Variant::Tf32x3 => k::SVD_RECONSTRUCT_TF32X3.name(),
            Variant::Tf32Wgmma if self.uses_register_panel(k, output_tiles(m, n), sms) => {
                k::SVD_RECONSTRUCT_TF32_WGMMA_REGISTER_PANEL.name()
            }
            Variant::Tf32Wgmma if self.uses_panel(k) => k::SVD_RECONSTRUCT_TF32_WGMMA_PANEL.name(),
            Variant::Tf32Wgmma => k::SVD_RECONSTRUCT_TF32_WGMMA.name(),
            Variant::Tf32x3Wgmma => k::SVD_RECONSTRUCT_TF32X3_WGMMA.name(),
        }
    }

    /// Whether `device` can run this variant: all but the `wgmma` ones run everywhere; those
    /// exist only in the sm_90a cubin, all of them or none.
    pub fn available_on(self, device: &Device) -> bool {
        !matches!(self, Variant::Tf32Wgmma | Variant::Tf32x3Wgmma)
            || device.has_kernel(self.kernel_name((1, 1, 1), 1))
    }
}

/// The f32 operands of one rank-k reconstruction, contiguous as the kernels read them.
#[derive(Debug, Clone)]
pub struct RankK {
    /// `U[:, :k]`, `m × k`.
    pub u: Array2<f32>,
    /// `s[:k]`.
    pub s: Vec<f32>,
    /// `Vᵀ[:k, :]`, `k × n`.
    pub vt: Array2<f32>,
}

/// Device time of each phase of one reconstruction, milliseconds (CUDA events on a GPU).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct PhaseTimes {
    /// Copy of `U[:, :k]`, `s` and `Vᵀ[:k, :]` to the device.
    pub h2d_ms: f64,
    /// The kernel.
    pub kernel_ms: f64,
    /// Copy of the `m × n` result back.
    pub d2h_ms: f64,
}

impl PhaseTimes {
    /// Sum of the phases.
    pub fn total_ms(&self) -> f64 {
        self.h2d_ms + self.kernel_ms + self.d2h_ms
    }
}

fn check_operands(op: &RankK, variant: Variant, block: u32) -> Result<(usize, usize, usize)> {
    let (m, kk) = op.u.dim();
    let (kv, n) = op.vt.dim();
    ensure(m > 0 && n > 0 && kk > 0, || format!("empty operands: U is {m} × {kk}, Vᵀ is {kv} × {n}"))?;
    ensure(kk == kv && kk == op.s.len(), || {
        format!("U has {kk} columns, s has {} values, Vᵀ has {kv} rows: they must agree", op.s.len())
    })?;
    ensure((m as u64) * (n.max(kk) as u64) <= u32::MAX as u64, || {
        format!("a {m} × {n} result with k = {kk} exceeds the kernels' 32-bit indexing")
    })?;
    if !variant.fixed_block() {
        ensure(matches!(block, 8 | 16 | 32), || format!("block size {block} is not 8, 16 or 32"))?;
    }
    Ok((m, n, kk))
}

/// The device buffers of a reconstruction: `U`, `s` and `Vᵀ` in, the output.
pub type ReconstructBuffers<'a> = (&'a Buffer<f32>, &'a Buffer<f32>, &'a Buffer<f32>, &'a mut Buffer<f32>);

/// The operands and the output of a reconstruction as views: parts of buffers, or another
/// library's arrays ([`BufferView::from_raw_parts`]).
pub struct ReconstructViews<'a> {
    /// `U`.
    pub u: BufferView<'a, f32>,
    /// `s`.
    pub s: BufferView<'a, f32>,
    /// `Vᵀ`.
    pub vt: BufferView<'a, f32>,
    /// The output.
    pub out: BufferViewMut<'a, f32>,
}

impl<'a> From<ReconstructBuffers<'a>> for ReconstructViews<'a> {
    fn from((u, s, vt, out): ReconstructBuffers<'a>) -> Self {
        ReconstructViews { u: u.into(), s: s.into(), vt: vt.into(), out: out.into() }
    }
}

/// Queues the reconstruction of rank `kk` on device buffers (`m × k`, `k`, `k × n` in, `m × n`
/// out) on `queue`.
///
/// # Safety
/// The buffers must stay alive, and the output unread, until `queue` has run the kernel.
pub unsafe fn launch_reconstruct(
    device: &Device,
    queue: &Queue,
    variant: Variant,
    block: u32,
    bufs: ReconstructBuffers,
    (m, n, kk): (usize, usize, usize),
) -> Result<()> {
    let bufs = ReconstructViews::from(bufs);
    let single = BatchShape { images: 1, ldu: kk, strides: k::Batch::default() };
    // SAFETY: forwarded from the caller.
    unsafe { launch_reconstruct_batch(device, queue, variant, block, bufs, (m, n, kk), single) }
}

/// How the images of a batched reconstruction lie in memory.
#[derive(Debug, Clone, Copy)]
pub struct BatchShape {
    /// Images (`gridDim.z`).
    pub images: usize,
    /// Leading dimension of each `U` (`≥ k`): the first `k` of `ldu` columns are used.
    pub ldu: usize,
    /// Element strides between consecutive images' operands.
    pub strides: k::Batch,
}

impl BatchShape {
    /// Checks that `bufs` hold every image of a rank-`kk` reconstruction of `m × n` images
    /// (the kernels do not check their accesses on the GPU).
    fn check_buffers(&self, bufs: &ReconstructViews, (m, n, kk): (usize, usize, usize)) -> Result<()> {
        ensure(self.images >= 1 && m >= 1 && n >= 1 && kk >= 1, || {
            format!("empty reconstruction: {} images of {m} × {n}, k = {kk}", self.images)
        })?;
        ensure(kk <= self.ldu, || format!("k = {kk} exceeds U's leading dimension {}", self.ldu))?;
        let last = self.images - 1;
        let strides = self.strides;
        let needs = [
            ("U", bufs.u.len(), last * strides.u as usize + (m - 1) * self.ldu + kk),
            ("s", bufs.s.len(), last * strides.s as usize + kk),
            ("Vᵀ", bufs.vt.len(), last * strides.vt as usize + kk * n),
            ("the output", bufs.out.len(), last * strides.out as usize + m * n),
        ];
        for (what, len, need) in needs {
            ensure(len >= need, || {
                format!(
                    "{what} buffer holds {len} elements, the reconstruction of {} images of {m} × {n} \
                     at k = {kk} reads {need}",
                    self.images
                )
            })?;
        }
        Ok(())
    }
}

/// Queues the reconstruction of rank `kk` for every image of a batch in one launch: image `z`
/// has `U` (`m × ldu`, first `kk` columns used), `s` (first `kk` values), `Vᵀ` (first `kk` rows of
/// `n`) and the `m × n` output at the buffers' starts plus `z` times `shape.strides`. The buffers
/// are checked to hold every image. `bufs`: [`ReconstructBuffers`] or [`ReconstructViews`].
///
/// # Safety
/// The buffers must stay alive, and the output unread, until `queue` has run the kernels.
pub unsafe fn launch_reconstruct_batch<'a>(
    device: &Device,
    queue: &Queue,
    variant: Variant,
    block: u32,
    bufs: impl Into<ReconstructViews<'a>>,
    (m, n, kk): (usize, usize, usize),
    shape: BatchShape,
) -> Result<()> {
    let bufs = bufs.into();
    shape.check_buffers(&bufs, (m, n, kk))?;
    let ReconstructViews { u, s: sv, vt, out } = bufs;
    let images = shape.images as f64;
    let work = Work {
        bytes: images * 4.0 * (m * kk + kk + kk * n + m * n) as f64,
        flops: images * 2.0 * (m * n * kk) as f64,
    };
    let mut cfg = variant.launch_config(m, n, block);
    cfg.grid.z = shape.images as u32;
    let kernel = match variant {
        Variant::Naive => &k::SVD_RECONSTRUCT_NAIVE,
        Variant::Tiled => &k::SVD_RECONSTRUCT_TILED,
        Variant::Regtiled => &k::SVD_RECONSTRUCT_REGTILED,
        Variant::Tf32 => &k::SVD_RECONSTRUCT_TF32,
        Variant::Tf32x3 => &k::SVD_RECONSTRUCT_TF32X3,
        // SAFETY: forwarded from the caller.
        Variant::Tf32Wgmma | Variant::Tf32x3Wgmma => {
            return unsafe {
                launch_wgmma(
                    device,
                    queue,
                    variant,
                    ReconstructViews { u, s: sv, vt, out },
                    (m, n, kk),
                    shape,
                )
            };
        }
    };
    let args = (u, sv, vt, out, m as u32, n as u32, kk as u32, shape.ldu as u32, shape.strides);
    // SAFETY: forwarded from the caller; the buffers hold every image (checked above).
    unsafe { device.launch_counted(queue, kernel, cfg, args, Some(work)) }
}

/// The `wgmma` variants: prepares the operands in temporaries of `queue` ([`k::tf32_prepare`];
/// rounded to tf32 for one pass, as they are for the 3xTF32 split), then multiplies them
/// ([`k::svd_reconstruct_tf32_wgmma_register_panel`] for one pass at `k ≤`
/// [`k::REGISTER_PANEL_MAX_K`], [`k::svd_reconstruct_tf32_wgmma_panel`] up to [`k::PANEL_MAX_K`],
/// [`k::svd_reconstruct_tf32_wgmma`] above, [`k::svd_reconstruct_tf32x3_wgmma`]); the panel
/// kernels as programmatic dependents of the preparation ([`Device::launch_dependent`]).
///
/// # Safety
/// As for [`launch_reconstruct_batch`], whose checks of the buffers come first.
unsafe fn launch_wgmma(
    device: &Device,
    queue: &Queue,
    variant: Variant,
    ReconstructViews { u, s: sv, vt, out }: ReconstructViews,
    (m, n, kk): (usize, usize, usize),
    shape: BatchShape,
) -> Result<()> {
    let (kernel, one_pass) = match variant {
        Variant::Tf32Wgmma => (&k::SVD_RECONSTRUCT_TF32_WGMMA, true),
        _ => (&k::SVD_RECONSTRUCT_TF32X3_WGMMA, false),
    };
    ensure(variant.available_on(device), || {
        format!(
            "variant {} needs an sm_90 GPU (H100, H200) running the embedded sm_90a cubin; \
             {} has no `{}` (use tf32 or tf32x3)",
            variant.name(),
            device.describe(),
            kernel.name()
        )
    })?;
    let (images, kp) = (shape.images, k::prepared_row(kk as u32) as usize);
    let mut a = device.alloc_temporary::<f32>(queue, images * m * kp)?;
    let mut b = device.alloc_temporary::<f32>(queue, images * n * kp)?;
    let (m32, n32, k32) = (m as u32, n as u32, kk as u32);
    let (_, blocks) = k::prepare_blocks(m32, n32, k32);
    let prepare = LaunchConfig {
        grid: Dim3 { x: blocks, y: 1, z: images as u32 },
        block: Dim3::x(k::PREPARE_THREADS),
        shared_bytes: k::PREPARE_SHARED_BYTES,
    };
    // The register-panel kernel takes `b` in the order of its register fragments of `a`.
    let (tiles, sms) = (images * output_tiles(m, n), device.multiprocessors()? as usize);
    let (panel, register_panel) = (variant.uses_panel(kk), variant.uses_register_panel(kk, tiles, sms));
    let flags = (one_pass as u32, register_panel as u32);
    let (ldu, strides) = (shape.ldu as u32, shape.strides);
    let prepare_args = (u, sv, vt, &mut a, &mut b, m32, n32, k32, ldu, strides, flags.0, flags.1);
    let moved = Work { bytes: (images * 4 * (m * kk + kk + kk * n + (m + n) * kp)) as f64, flops: 0.0 };
    let work = Work {
        bytes: (images * 4 * (m * kp + n * kp + m * n)) as f64,
        flops: (images * 2 * m * n * kk) as f64,
    };
    let stride = shape.strides.out;
    // SAFETY: `u`, `sv`, `vt` and `out` hold the batch (checked by the caller); `a` and `b` were
    // allocated above for it and live until the queued work is done (their frees are queued after it).
    unsafe {
        device.launch_counted(queue, &k::TF32_PREPARE, prepare, prepare_args, Some(moved))?;
        // One pass at small ranks: a kernel that keeps each block's panel of `a` (in registers at
        // the smallest), a panel's columns shared out among blocks so that the grid fills the GPU
        // once. Those are dependent launches: they start while `tf32_prepare` finishes and wait
        // for `a` and `b` in the kernel (H100: 1–4% less time; the streaming kernels, two blocks
        // per SM, lost up to 15% that way).
        if panel {
            let (kernel, shared_bytes) = if register_panel {
                (&k::SVD_RECONSTRUCT_TF32_WGMMA_REGISTER_PANEL, k::REGISTER_PANEL_SHARED_BYTES)
            } else {
                (&k::SVD_RECONSTRUCT_TF32_WGMMA_PANEL, k::panel_shared_bytes(kp as u32))
            };
            let tiles_n = n.div_ceil(k::MMA_TILE_N as usize);
            let panels = m.div_ceil(k::MMA_TILE_M as usize);
            let per_block = tiles.div_ceil(sms).clamp(1, tiles_n);
            let cfg = LaunchConfig {
                grid: Dim3 { x: tiles_n.div_ceil(per_block) as u32, y: panels as u32, z: images as u32 },
                block: Dim3::x(k::WGMMA_THREADS),
                shared_bytes,
            };
            let args = (&a, &b, out, m32, n32, kp as u32, stride, per_block as u32);
            device.launch_dependent(queue, kernel, cfg, args, Some(work))
        } else {
            let mut product = variant.launch_config(m, n, 16);
            product.grid.z = images as u32;
            device.launch_counted(
                queue,
                kernel,
                product,
                (&a, &b, out, m32, n32, kp as u32, stride),
                Some(work),
            )
        }
    }
}

/// Reconstructs `(U·diag(s))·Vᵀ` from `op` on `device`, timing each phase.
pub fn reconstruct(
    device: &Device,
    op: &RankK,
    variant: Variant,
    block: u32,
) -> Result<(Array2<f32>, PhaseTimes)> {
    let dims @ (m, n, _) = check_operands(op, variant, block)?;
    let t0 = device.mark()?;
    let du = device.upload(op.u.as_slice().expect("standard layout"))?;
    let ds = device.upload(&op.s)?;
    let dvt = device.upload(op.vt.as_slice().expect("standard layout"))?;
    let mut dout = device.alloc::<f32>(m * n)?;
    let t1 = device.mark()?;
    // SAFETY: the buffers have the sizes `check_operands` validated.
    unsafe { launch_reconstruct(device, device.queue(), variant, block, (&du, &ds, &dvt, &mut dout), dims)? };
    let t2 = device.mark()?;
    let out = device.download(&dout)?;
    let t3 = device.mark()?;
    let times = PhaseTimes {
        h2d_ms: device.elapsed_ms(&t0, &t1)?,
        kernel_ms: device.elapsed_ms(&t1, &t2)?,
        d2h_ms: device.elapsed_ms(&t2, &t3)?,
    };
    Ok((Array2::from_shape_vec((m, n), out).expect("m·n elements"), times))
}

/// Queues [`kernels::svd::quantize_gray8`] on `queue`: the f32 values of `src` in `[0, 1]`
/// (clamped) to the 8-bit pixels a PNG stores, the bytes of [`crate::commands::image_io::to_gray8`] with
/// [`crate::commands::image_io::Scaling::Clamp`], one per element of `dst` (`src` at least as long).
///
/// # Safety
/// The buffers must stay alive, and `dst` unread, until `queue` has run the kernel.
pub unsafe fn launch_quantize_gray8(
    device: &Device,
    queue: &Queue,
    src: &Buffer<f32>,
    dst: &mut Buffer<u8>,
) -> Result<()> {
    ensure(src.len() >= dst.len(), || {
        format!("quantize_gray8: {} values for {} pixels", src.len(), dst.len())
    })?;
    let count = dst.len();
    let cfg = LaunchConfig::for_grid_stride(count, 256, 4096);
    let work = Work { bytes: 5.0 * count as f64, flops: 3.0 * count as f64 };
    // SAFETY: forwarded from the caller; the slices carry their lengths.
    unsafe { device.launch_counted(queue, &k::QUANTIZE_GRAY8, cfg, (src, dst), Some(work)) }
}
