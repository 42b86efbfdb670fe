//! The factorisation's device buffers, allocated once from the plan, and the steps of the
//! iteration as methods on them (the loop that calls them is `mod.rs`'s [`factor_with`](super::factor_with)).
//!
//! Safety, once for every launch of this file: each kernel and GEMM is queued on the device's
//! queue with buffers that the [`Workspace`] owns or borrows (the images `a`) and that are sized
//! from the plan, which the GEMMs check against their layouts and the kernels index through
//! checked slices (but the one-block kernels' shared work space, which the plan's launch sizes).
//! The workspace lives until [`Workspace::extract`] has waited for the queue; a step that fails
//! drops it early, and freeing device memory waits for the device's work.

use super::chebyshev::{self, ChebyshevFilter};
use super::cholesky::inverse_cholesky_factor;
use super::convergence::StopTest;
use super::factors::{DeviceFactors, IterationCounts};
use super::gemm::{Gemms, Operand, operand as op};
use super::passes::{finish_squared_sums, queue_squared_sums};
use super::plan::{GramMethod, Plan};
use super::ritz::{RitzPairs, RitzSolver};
use crate::launch::device::{Buffer, BufferView, BufferViewMut, Device, IntoKernelArgs};
use crate::launch::error::{Error, Result, ensure};
use gpu_std::KernelFn;
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor::{self as kf, Layout};

/// Seed of the starting basis ([`kf::random_subspace`]), mixed with the shape.
const STARTING_SEED: u32 = 0x5eed_0000;

/// Rows of the basis per block of the kernels that sum over them ([`kf::ritz_residuals`],
/// [`kf::deflation_overlaps`], [`kf::basis_column_norms`]): one block per 32 columns took 0.1–0.2
/// ms at `r = 4096`, `b = 512`.
const SUMMED_ROWS: usize = 256;

/// Queues `kernel` on the device's queue, under the module's safety argument.
fn launch<A: Copy>(
    device: &Device,
    kernel: &KernelFn<A>,
    cfg: LaunchConfig,
    args: impl IntoKernelArgs<A>,
) -> Result<()> {
    // SAFETY: the module's argument (its doc): the workspace's buffers, sized from the plan,
    // alive until the queue has finished with them.
    unsafe { device.launch(kernel, cfg, args) }
}

/// `A_eff`'s layout (`m_eff × r`): `A` for tall images, `Aᵀ` for wide ones.
pub(super) fn a_eff(plan: &Plan) -> Layout {
    let (m, n) = plan.dims;
    let a = Layout::row_major(n as u32, (m * n) as u32);
    if plan.tall() { a } else { a.transposed() }
}

/// Checks that every image's Gram matrix `g` (through its layout) is finite, by its trace
/// (`‖A‖_F²`, [`kf::gram_traces`]; one wait): an image with a NaN or infinite value, or values
/// whose squares overflow, is an error ([`Error::InvalidInput`]) naming it, before anything is
/// solved on its `G`. The accurate factorisation's finiteness check: `G` is small beside `A`,
/// where a pass over the images took 0.17 ms of 100 000 × 512 (H200). Its wait would stall the
/// `svd` job's queued launches, so that path checks finiteness otherwise ([`FiniteCheck`](super::FiniteCheck)).
fn check_finite_gram(device: &Device, plan: &Plan, (g, layout): (BufferView<'_, f64>, Layout)) -> Result<()> {
    const THREADS: u32 = 256;
    let mut traces = device.alloc_temporary::<f64>(device.queue(), plan.images)?;
    let cfg = LaunchConfig {
        grid: Dim3 { x: 1, y: 1, z: plan.images as u32 },
        block: Dim3::x(THREADS),
        shared_bytes: THREADS * 8,
    };
    launch(device, &kf::GRAM_TRACES, cfg, (g, layout, plan.r as u32, &mut traces))?;
    match device.download(&traces)?.iter().position(|t| !t.is_finite()) {
        Some(i) => Err(Error::InvalidInput(format!(
            "matrix {i} holds a NaN or infinite value (or values whose squares overflow): the matrix must be finite"
        ))),
        None => Ok(()),
    }
}

/// The device buffers of one factorisation and the plan they were sized for.
pub(super) struct Workspace<'a> {
    device: &'a Device,
    plan: &'a Plan,
    gemms: Gemms<'a>,
    /// The images, `m × n` row-major each.
    a: BufferView<'a, f64>,
    /// `G`, `r × r` per image.
    g: Buffer<f64>,
    /// `[Q Y]`, `r × 2b` per image: the basis and `Y = G·Q`; the next basis is built in the left half.
    qy: Buffer<f64>,
    /// `[V W]`, `r × 2b` per image: the Ritz vectors `V = Q·Z` and `W = G·V`; the first Cholesky
    /// QR pass's result goes to its left half.
    vw: Buffer<f64>,
    /// Cholesky QR's Gram matrix and inverse factor, `b × b` per image, and its work space.
    gram: Buffer<f64>,
    rinv: Buffer<f64>,
    scratch: Buffer<f64>,
    solver: Box<dyn RitzSolver>,
    pairs: RitzPairs,
    /// Per image `‖W_i‖²` then the residuals `‖W_i − θ_i·V_i‖²` (`2b`), as `ritz_residuals`
    /// writes them.
    stats: Buffer<f64>,
    /// Squared norms of the basis's columns after a plain subspace step's first Cholesky QR
    /// pass, `b` per image ([`kf::basis_column_norms`]).
    column_norms: Buffer<f64>,
    /// The next basis's column weights `[e f g]`, `3b` per image.
    weights: Buffer<f64>,
    /// 1 per image that has converged.
    converged: Buffer<u32>,
    filter: FilterSpace,
}

/// The Chebyshev filter's buffers.
struct FilterSpace {
    /// `[a, p, q]` per step and image.
    coefficients: Buffer<f64>,
    /// The locked pairs' vectors (`r × DEFLATED_PAIRS` per image, zero until a filter saves them),
    /// values, and overlaps `θ_l·v_lᵀ·x_i` with the basis it filters.
    locked: Buffer<f64>,
    locked_theta: Buffer<f64>,
    overlaps: Buffer<f64>,
}

impl<'a> Workspace<'a> {
    /// Every buffer of the plan's factorisation of `a`.
    pub(super) fn new(device: &'a Device, plan: &'a Plan, a: BufferView<'a, f64>) -> Result<Self> {
        let (images, r, b) = (plan.images, plan.r, plan.b);
        let deflated = kf::DEFLATED_PAIRS;
        let g = device.alloc_temporary::<f64>(device.queue(), images * r * r)?;
        let qy = device.alloc_temporary::<f64>(device.queue(), images * r * 2 * b)?;
        let vw = device.alloc_temporary::<f64>(device.queue(), images * r * 2 * b)?;
        let (gram, rinv) = (
            device.alloc_temporary::<f64>(device.queue(), images * b * b)?,
            device.alloc_temporary::<f64>(device.queue(), images * b * b)?,
        );
        let solver = plan.ritz_solver(device)?;
        let mut locked = device.alloc_temporary::<f64>(device.queue(), images * r * deflated)?;
        device.fill(&mut locked, 0.0)?;
        let filter = FilterSpace {
            coefficients: device
                .alloc_temporary::<f64>(device.queue(), chebyshev::MAX_DEGREE * images * 3)?,
            locked,
            locked_theta: device.alloc_temporary::<f64>(device.queue(), images * deflated)?,
            overlaps: device.alloc_temporary::<f64>(device.queue(), images * deflated * b)?,
        };
        Ok(Workspace {
            device,
            plan,
            gemms: Gemms::new(device, images, plan.tensor_cores),
            a,
            g,
            qy,
            vw,
            gram,
            rinv,
            // The one-block kernels' work space per image; the blocked Cholesky's `b` diagonal values.
            scratch: device
                .alloc_temporary::<f64>(device.queue(), images * kf::eigen_scratch(b as u32) as usize)?,
            solver,
            pairs: RitzPairs::new(device, b, images)?,
            stats: device.alloc_temporary::<f64>(device.queue(), images * 2 * b)?,
            column_norms: device.alloc_temporary::<f64>(device.queue(), images * b)?,
            weights: device.alloc_temporary::<f64>(device.queue(), images * 3 * b)?,
            converged: device.alloc_temporary::<u32>(device.queue(), images)?,
            filter,
        })
    }

    /// `G`'s layout: `r × r` row-major per image.
    fn g_layout(&self) -> Layout {
        Layout::row_major(self.plan.r as u32, (self.plan.r * self.plan.r) as u32)
    }

    /// `[Q Y]`'s and `[V W]`'s layout: `r × 2b` row-major per image.
    fn qy_layout(&self) -> Layout {
        let (r, b) = (self.plan.r, self.plan.b);
        Layout::row_major(2 * b as u32, (r * 2 * b) as u32)
    }

    /// The small matrices' layout: `b × b` row-major per image.
    fn square_layout(&self) -> Layout {
        let b = self.plan.b;
        Layout::row_major(b as u32, (b * b) as u32)
    }

    /// Kernels over the `r × b` columns of each image (one thread per element, grid-strided).
    fn columns_config(&self) -> LaunchConfig {
        let p = self.plan;
        LaunchConfig {
            grid: Dim3 { x: (p.r * p.b).div_ceil(256).min(1024) as u32, y: 1, z: p.images as u32 },
            block: Dim3::x(256),
            shared_bytes: 0,
        }
    }

    /// Kernels over each image's `b` columns of `[V W]` (`ritz_residuals`, `deflation_overlaps`).
    fn residuals_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3 { x: self.plan.b.div_ceil(32) as u32, y: 1, z: self.plan.images as u32 },
            block: Dim3 { x: 32, y: kf::RESIDUAL_ROWS, z: 1 },
            shared_bytes: 32 * kf::RESIDUAL_ROWS * 16,
        }
    }

    /// [`Self::residuals_config`] with the rows dealt over blocks too, a run of [`SUMMED_ROWS`]
    /// each (the kernels that add their sums atomically).
    fn row_blocks_config(&self) -> LaunchConfig {
        let residuals = self.residuals_config();
        let row_blocks = self.plan.r.div_ceil(SUMMED_ROWS) as u32;
        LaunchConfig { grid: Dim3 { y: row_blocks, ..residuals.grid }, ..residuals }
    }

    /// `G = A_effᵀ·A_eff`, only the upper triangle of blocks computed and mirrored; with
    /// `check_finite`, checked by [`check_finite_gram`].
    pub(super) fn gram_matrix(&mut self, check_finite: bool) -> Result<()> {
        let g_layout = self.g_layout();
        let g = self.g.view_mut(..)?;
        Self::queue_gram_matrix(&mut self.gemms, self.plan, self.a, (g, g_layout))?;
        if check_finite {
            check_finite_gram(self.device, self.plan, (self.g.view(..)?, g_layout))?;
        }
        Ok(())
    }

    /// Every eigenpair of `G` (the plan's `b` is `r`): `G` written where the Ritz solver reads its
    /// input and solved, and the identity as the basis, so that the Ritz vectors are `G`'s
    /// eigenvectors. With `check_finite`, `G` is checked by [`check_finite_gram`] before the solve.
    pub(super) fn gram_eigenpairs(&mut self, check_finite: bool) -> Result<()> {
        let r = self.plan.r as u32;
        Self::queue_gram_matrix(&mut self.gemms, self.plan, self.a, self.solver.input()?)?;
        if check_finite {
            let (g, layout) = self.solver.input()?;
            check_finite_gram(self.device, self.plan, (g.view(..)?, layout))?;
        }
        // SAFETY: the module's argument.
        unsafe { self.solver.solve(self.device, &mut self.pairs)? };
        launch(self.device, &kf::IDENTITY_SUBSPACE, self.columns_config(), (&mut self.qy, r, r * 2 * r))
    }

    /// Queues `G = A_effᵀ·A_eff` of the images `a` into `g` (with its layout).
    fn queue_gram_matrix(
        gemms: &mut Gemms<'_>,
        plan: &Plan,
        a: BufferView<'_, f64>,
        g: (BufferViewMut<'_, f64>, Layout),
    ) -> Result<()> {
        let (m, n) = plan.dims;
        let operands = (op(a, a_eff(plan).transposed()), op(a, a_eff(plan)));
        // SAFETY: the module's argument.
        unsafe { gemms.product(operands, g, None, (plan.r, plan.r, m.max(n)), true) }
    }

    /// The starting basis: a seeded random matrix (the same for every image and run of a shape,
    /// columns of about unit norm and nearly orthogonal). Where products with `G` follow before
    /// Rayleigh–Ritz it is used as it is: only its span matters to the first product. Else it is
    /// orthonormalised by two passes of Cholesky QR.
    pub(super) fn start_basis(&mut self) -> Result<()> {
        let (r, b) = (self.plan.r as u32, self.plan.b as u32);
        let seed = STARTING_SEED ^ (r << 12) ^ b;
        launch(
            self.device,
            &kf::RANDOM_SUBSPACE,
            self.columns_config(),
            (&mut self.qy, r, b, r * 2 * b, seed),
        )?;
        if self.plan.products_before_rayleigh_ritz > 0 { Ok(()) } else { self.cholesky_qr2() }
    }

    /// Two passes of Cholesky QR on the basis in Q's place: orthonormal to rounding.
    fn cholesky_qr2(&mut self) -> Result<()> {
        self.cholesky_qr(0, 2)
    }

    /// A step of plain subspace iteration, before the first Rayleigh–Ritz step (no Ritz values
    /// scale the columns yet): `Q ← Y = G·Q`, orthonormalised; where `G` has fewer than `b`
    /// independent directions, the columns the first pass loses keep Q's
    /// ([`kf::restore_lost_columns`]). Only the `last` step before Rayleigh–Ritz takes a second
    /// pass: the others feed one more product, which needs their span, not orthonormality to
    /// rounding (one pass leaves `QᵀQ` within about `ε·κ(Y)²` of `I`).
    pub(super) fn subspace_step(&mut self, last: bool) -> Result<()> {
        self.cholesky_qr(self.plan.b, if last { 2 } else { 1 })
    }

    /// `passes` (1 or 2) of Cholesky QR on the `b` columns of `qy` from `first_column` (Q's, 0, or
    /// Y's, `b`) into Q's place: each pass forms the Gram matrix, inverts its Cholesky factor and
    /// multiplies, the first into `vw`'s left half, the second from there back to `qy` (one pass
    /// swaps the two buffers instead, which have the same shape).
    fn cholesky_qr(&mut self, first_column: usize, passes: usize) -> Result<()> {
        let (r, b) = (self.plan.r, self.plan.b);
        let (qy_layout, square) = (self.qy_layout(), self.square_layout());
        for pass in 0..passes {
            let from = if pass == 0 { self.qy.view(first_column..)? } else { self.vw.view(..)? };
            let operands = (op(from, qy_layout.transposed()), op(from, qy_layout));
            // SAFETY: the module's argument.
            unsafe {
                self.gemms.product(operands, (self.gram.view_mut(..)?, square), None, (b, b, r), true)?
            };
            self.inverse_cholesky_factor()?;
            let (from, to) = if pass == 0 {
                (self.qy.view(first_column..)?, self.vw.view_mut(..)?)
            } else {
                (self.vw.view(..)?, self.qy.view_mut(..)?)
            };
            let operands = (op(from, qy_layout), op(self.rinv.view(..)?, square));
            // SAFETY: the module's argument.
            unsafe { self.gemms.product(operands, (to, qy_layout), None, (r, b, b), false)? };
            if pass == 0 && first_column > 0 {
                let config =
                    LaunchConfig { shared_bytes: 32 * kf::RESIDUAL_ROWS * 8, ..self.row_blocks_config() };
                self.device.zero_on(self.device.queue(), self.column_norms.view_mut(..)?)?;
                let args = (&self.vw, r as u32, b as u32, &mut self.column_norms);
                launch(self.device, &kf::BASIS_COLUMN_NORMS, config, args)?;
                let columns = self.columns_config();
                let args = (&self.qy, &self.column_norms, r as u32, b as u32, &mut self.vw);
                launch(self.device, &kf::RESTORE_LOST_COLUMNS, columns, args)?;
            }
        }
        if passes == 1 {
            std::mem::swap(&mut self.qy, &mut self.vw);
        }
        Ok(())
    }

    /// `R⁻¹` of every image's Gram matrix `gram`'s Cholesky factor into `rinv`, by the plan's method.
    fn inverse_cholesky_factor(&mut self) -> Result<()> {
        let buffers = (&mut self.gram, &mut self.rinv, &mut self.scratch);
        // SAFETY: the module's argument: the workspace's buffers, sized from the plan.
        unsafe { inverse_cholesky_factor(self.device, self.plan, buffers) }
    }

    /// `Y = G·Q`, into the right half of each row of `[Q Y]`.
    pub(super) fn multiply_by_g(&mut self) -> Result<()> {
        let (r, b) = (self.plan.r, self.plan.b);
        let (g_layout, qy_layout) = (self.g_layout(), self.qy_layout());
        let qy_whole = self.qy.view_mut(..)?;
        // SAFETY: Y = G·Q reads only columns 0..b through this view and writes only columns b..2b
        // through the other.
        let qy_read = unsafe { qy_whole.aliased_view() };
        let y_write = qy_whole.into_view_mut(b..)?;
        let operands = (op(self.g.view(..)?, g_layout), op(qy_read, qy_layout));
        // SAFETY: the module's argument.
        unsafe { self.gemms.product(operands, (y_write, qy_layout), None, (r, b, r), false) }
    }

    /// A power step without Rayleigh–Ritz (which would not change the subspace): `Q ← G·Q` with
    /// the columns scaled by the last Ritz values, orthonormalised.
    pub(super) fn power_step(&mut self) -> Result<()> {
        let (r, b) = (self.plan.r as u32, self.plan.b as u32);
        launch(
            self.device,
            &kf::POWER_STEP_COLUMNS,
            self.columns_config(),
            (&mut self.qy, &self.weights, r, b),
        )?;
        self.cholesky_qr2()
    }

    /// Rayleigh–Ritz: `T = QᵀY`, its eigenpairs, `[V W] = [Q·Z  Y·Z]`, then each pair's residual,
    /// the convergence flags by `test` and the next basis's column weights.
    pub(super) fn rayleigh_ritz(&mut self, test: StopTest) -> Result<()> {
        let (r, b, k) = (self.plan.r, self.plan.b, self.plan.k);
        let (qy_layout, square) = (self.qy_layout(), self.square_layout());
        let operands = (op(self.qy.view(..)?, qy_layout.transposed()), op(self.qy.view(b..)?, qy_layout));
        // SAFETY (this block): the module's argument; `T` is symmetric, so only the upper triangle
        // of blocks is computed, and mirrored.
        unsafe {
            self.gemms.product(operands, self.solver.input()?, None, (b, b, r), true)?;
            self.solver.solve(self.device, &mut self.pairs)?;
            for half in [0, b] {
                let operands =
                    (op(self.qy.view(half..)?, qy_layout), op(self.pairs.vectors.view(..)?, square));
                self.gemms.product(
                    operands,
                    (self.vw.view_mut(half..)?, qy_layout),
                    None,
                    (r, b, b),
                    false,
                )?;
            }
        }
        let theta = &self.pairs.theta;
        self.device.zero_on(self.device.queue(), self.stats.view_mut(..)?)?;
        launch(
            self.device,
            &kf::RITZ_RESIDUALS,
            self.row_blocks_config(),
            (&self.vw, theta, r as u32, b as u32, &mut self.stats),
        )?;
        let per_image = LaunchConfig {
            grid: Dim3::x(self.plan.images as u32),
            block: Dim3::x(self.plan.per_image_threads),
            shared_bytes: 8,
        };
        let (stats, tol, floor) = (&self.stats, test.tolerance, test.floor);
        let args = (stats, theta, b as u32, k as u32, tol, floor, &mut self.weights, &mut self.converged);
        launch(self.device, &kf::RITZ_WEIGHTS, per_image, args)
    }

    /// The convergence flags of the last Rayleigh–Ritz step, one per image (a wait for the queue).
    pub(super) fn converged(&self) -> Result<Vec<u32>> {
        self.device.download(&self.converged)
    }

    /// The last Rayleigh–Ritz step's residual statistics and Ritz values (`2b` and `b` per image).
    pub(super) fn ritz_statistics(&self) -> Result<(Vec<f64>, Vec<f64>)> {
        Ok((self.device.download(&self.stats)?, self.device.download(&self.pairs.theta)?))
    }

    /// The Chebyshev filter of `[V W]` in place: the halves of `vw` take turns holding its last two
    /// bases; each product `G·X` goes to Y's place in `qy`.
    pub(super) fn chebyshev_filter(&mut self, filter: &ChebyshevFilter) -> Result<()> {
        let mut padded = filter.coefficients.clone();
        padded.resize(self.filter.coefficients.len(), 0.0);
        self.device.upload_into(&mut self.filter.coefficients, &padded)?;
        self.device.upload_into(&mut self.weights, &filter.weights)?;
        self.device.upload_into(&mut self.filter.locked_theta, &filter.locked_theta)?;
        self.run_filter(filter)
    }

    /// The steps of the filter whose coefficients, weights and locked values
    /// [`Self::chebyshev_filter`] uploaded, on `[V W]` in place.
    fn run_filter(&mut self, filter: &ChebyshevFilter) -> Result<()> {
        let (r, b) = (self.plan.r, self.plan.b);
        let columns = self.columns_config();
        let mut newer = 0;
        for step in 0..filter.degree {
            if step > 0 {
                if filter.deflates {
                    let overlaps_cfg = LaunchConfig {
                        shared_bytes: 32 * kf::RESIDUAL_ROWS * kf::DEFLATED_PAIRS as u32 * 8,
                        ..self.row_blocks_config()
                    };
                    let f = &mut self.filter;
                    self.device.zero_on(self.device.queue(), f.overlaps.view_mut(..)?)?;
                    let args = (
                        &self.vw,
                        &f.locked,
                        &f.locked_theta,
                        r as u32,
                        b as u32,
                        newer as u32,
                        &mut f.overlaps,
                    );
                    launch(self.device, &kf::DEFLATION_OVERLAPS, overlaps_cfg, args)?;
                }
                let (g_layout, qy_layout) = (self.g_layout(), self.qy_layout());
                let operands = (op(self.g.view(..)?, g_layout), op(self.vw.view(newer..)?, qy_layout));
                // SAFETY: the module's argument.
                unsafe {
                    self.gemms.product(
                        operands,
                        (self.qy.view_mut(b..)?, qy_layout),
                        None,
                        (r, b, r),
                        false,
                    )?
                };
            }
            let f = &mut self.filter;
            let args = (
                &self.qy,
                &f.coefficients,
                r as u32,
                b as u32,
                step as u32,
                filter.degree as u32 - 1,
                newer as u32,
                &f.locked_theta,
                &f.overlaps,
                &mut f.locked,
                &mut self.vw,
            );
            launch(self.device, &kf::CHEBYSHEV_STEP, columns, args)?;
            newer = b - newer;
        }
        Ok(())
    }

    /// The last [`Self::chebyshev_filter`] again (its values already on the device) on the
    /// orthonormalised basis: `Y = G·Q`, then `[Q Y]` taken as `[V W]`.
    pub(super) fn filter_again(&mut self, filter: &ChebyshevFilter) -> Result<()> {
        self.multiply_by_g()?;
        std::mem::swap(&mut self.qy, &mut self.vw);
        self.run_filter(filter)
    }

    /// The next basis `X = V·E + W·F` in Q's place, orthonormalised by two passes of Cholesky QR
    /// (also between a filter's rounds: one pass would leave a column whose condition the filter
    /// took to 1e7 about 1e-2 from orthonormal, which the next round amplifies).
    pub(super) fn next_basis(&mut self) -> Result<()> {
        let (r, b) = (self.plan.r as u32, self.plan.b as u32);
        launch(
            self.device,
            &kf::COMBINE_COLUMNS,
            self.columns_config(),
            (&self.vw, &self.weights, r, b, &mut self.qy),
        )?;
        self.cholesky_qr2()
    }

    /// The leading `columns` (at most `b`) Ritz vectors `V = Q·Z` of the last Rayleigh–Ritz step
    /// (or `G`'s eigenvectors): `r × columns` row-major f64 per image, the subspace the accurate
    /// pass (`refine.rs`) starts from, a temporary of the device's queue.
    pub(super) fn ritz_vectors(&self, columns: usize) -> Result<Buffer<f64>> {
        let (images, r, b) = (self.plan.images, self.plan.r, self.plan.b);
        let mut v = self.device.alloc_temporary::<f64>(self.device.queue(), images * r * columns)?;
        let v_layout = Layout::row_major(columns as u32, (r * columns) as u32);
        let basis = op(self.qy.view(..)?, self.qy_layout());
        let vectors = op(self.pairs.vectors.view(..)?, self.square_layout());
        let dims = (r, columns, b);
        // SAFETY: the module's argument; `v` goes to the caller, who uses it on the device's queue,
        // in whose order it is freed.
        unsafe { self.gemms.product((basis, vectors), (v.view_mut(..)?, v_layout), None, dims, false)? };
        Ok(v)
    }

    /// `G`'s eigenvectors where it was decomposed whole (the basis is the identity, so they are
    /// the Ritz vectors without [`Workspace::ritz_vectors`]' product): `r × r` per image, column
    /// `i` for the `i`-th largest eigenvalue.
    pub(super) fn eigenvectors(&self) -> Result<Operand<'_>> {
        ensure(self.plan.method == GramMethod::WholeEigendecomposition, || {
            "the eigenvectors of a Gram matrix that was not decomposed whole".into()
        })?;
        Ok(op(self.pairs.vectors.view(..)?, self.square_layout()))
    }

    /// The factors as the reconstruction reads them: the Gram side's vectors `X = Q·Z[:, :k]`
    /// (`r × k`, f64, then f32), the other side `A_eff·X·diag(1/σ)`, the singular values and norms.
    pub(super) fn extract(self, counts: IterationCounts) -> Result<DeviceFactors> {
        let plan = self.plan;
        let ((m, n), images, k, r, b) = (plan.dims, plan.images, plan.k, plan.r, plan.b);
        let device = self.device;
        let mut x = device.alloc_temporary::<f64>(device.queue(), images * r * k)?;
        let mut u = device.alloc_temporary::<f32>(device.queue(), images * m * k)?;
        let mut vt = device.alloc_temporary::<f32>(device.queue(), images * k * n)?;
        let x_layout = Layout::row_major(k as u32, (r * k) as u32);
        let u_layout = Layout::row_major(k as u32, (m * k) as u32);
        // Vᵀ (k × n) written as the transpose of an n × k result.
        let v_layout = Layout::row_major(n as u32, (k * n) as u32).transposed();
        let (gram_side, other_side) = if plan.tall() { (v_layout, u_layout) } else { (u_layout, v_layout) };
        let basis = op(self.qy.view(..)?, self.qy_layout());
        let vectors = op(self.pairs.vectors.view(..)?, self.square_layout());
        let (gram, other) = if plan.tall() {
            (vt.view_mut(..)?, u.view_mut(..)?)
        } else {
            (u.view_mut(..)?, vt.view_mut(..)?)
        };
        let inv_sigma = Some((self.pairs.inv_sigma.view(..)?, b as u32));
        // SAFETY (this block): the module's argument; `x`, `u` and `vt` live past the download below.
        unsafe {
            self.gemms.product((basis, vectors), (x.view_mut(..)?, x_layout), None, (r, k, b), false)?;
            self.gemms.product((basis, vectors), (gram, gram_side), None, (r, k, b), false)?;
            let a_times_x = (op(self.a, a_eff(self.plan)), op(x.view(..)?, x_layout));
            self.gemms.product(a_times_x, (other, other_side), inv_sigma, (m.max(n), k, r), false)?;
        }
        // `‖A‖²` per image, for the job's rank errors (the accurate pass, which ends elsewhere,
        // does not read `A` for them).
        // SAFETY: `a` is borrowed for the workspace's life, past the wait below.
        let norms = unsafe { queue_squared_sums(device, device.queue(), self.a, None, m * n, images)? };
        let sigma = device.download(&self.pairs.sigma)?;
        let singular_values: Vec<Vec<f64>> = sigma.chunks(b).map(|c| c[..k].to_vec()).collect();
        let s32: Vec<f32> = singular_values.iter().flatten().map(|&v| v as f32).collect();
        let mut s = device.alloc_temporary::<f32>(device.queue(), s32.len())?;
        device.upload_into(&mut s, &s32)?;
        let frobenius_norms =
            finish_squared_sums(device, &norms.0, norms.1)?.into_iter().map(f64::sqrt).collect();
        Ok(DeviceFactors {
            images,
            dims: plan.dims,
            k,
            u,
            s,
            vt,
            singular_values,
            frobenius_norms,
            iterations: counts.iterations,
            rayleigh_ritz_steps: counts.rayleigh_ritz_steps,
            filter_steps: counts.filter_steps,
            plan: plan.clone(),
        })
    }
}
