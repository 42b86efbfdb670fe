//! Block Jacobi for Ritz problems too large for one block's shared memory
//! (`kernels::svd_factor::block_jacobi_*`), several thread blocks per image.

use super::ritz::{PairOrdering, RitzPairs, RitzSolver};
use crate::launch::device::{Backend, Buffer, BufferViewMut, Device};
use crate::launch::error::{Error, Result};
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor::{self as kf, Layout};

/// Sweeps after which the block Jacobi gives up (a dense matrix needs about 10; the Ritz
/// problems of later iterations, nearly diagonal, 1–3).
const BLOCK_JACOBI_SWEEPS: usize = 40;

/// The symmetric eigenproblems of a batch of `b × b` matrices on the device, by block Jacobi
/// (`kernels::svd_factor::block_jacobi_*`): the matrix, zero-padded to `n = 2·nb·pairs`, is
/// diagonalised by sweeps of `2·pairs − 1` rounds, each round diagonalising `pairs` submatrices
/// of `2nb × 2nb` per image in shared memory and applying their rotations to the whole matrix and
/// to the eigenvectors (two launches); the host reads one flag per image and sweep.
pub struct BlockJacobi {
    /// The padded size `n`.
    pub n: usize,
    /// The problems' size `b`.
    b: usize,
    /// Rows per block.
    nb: usize,
    images: usize,
    /// The matrix (two buffers: each round reads one and writes the other), `n × n` per image.
    x: [Buffer<f64>; 2],
    /// The accumulated eigenvectors, likewise.
    z: [Buffer<f64>; 2],
    /// Which of each pair holds the latest matrix and vectors.
    current: usize,
    rot: Buffer<f64>,
    rotated: Buffer<u32>,
    /// The eigenpairs' ordering into the Ritz pairs.
    ordering: PairOrdering,
    /// Sweeps the last solve took.
    sweeps: usize,
}

impl BlockJacobi {
    /// Rows per block for `b × b` problems: 32 on a GPU (`2nb × 2nb` subproblems of 64: 67 KiB
    /// of work space); in the simulator 8 up to `b = 64` and 16 above, so that its tests take
    /// several rounds and stay quick (it runs one OS thread per GPU thread).
    pub fn block_rows(device: &Device, b: usize) -> usize {
        match device.backend() {
            Backend::Gpu => 32,
            _ if b <= 64 => 8,
            _ => 16,
        }
    }

    /// Work space for `images` matrices of `b × b`; the matrix buffer to fill is
    /// [`BlockJacobi::matrix`] (or [`RitzSolver::input`]).
    pub fn new(device: &Device, b: usize, images: usize) -> Result<BlockJacobi> {
        let nb = Self::block_rows(device, b);
        let n = b.next_multiple_of(2 * nb);
        let zeros = vec![0.0f64; images * n * n];
        Ok(BlockJacobi {
            n,
            b,
            nb,
            images,
            x: [device.upload(&zeros)?, device.upload(&zeros)?],
            z: [
                device.alloc_temporary::<f64>(device.queue(), images * n * n)?,
                device.alloc_temporary::<f64>(device.queue(), images * n * n)?,
            ],
            current: 0,
            rot: device.alloc_temporary::<f64>(device.queue(), images * n * 2 * nb)?,
            rotated: device.alloc_temporary::<u32>(device.queue(), images)?,
            ordering: PairOrdering::new(device, b, images)?,
            sweeps: 0,
        })
    }

    /// The matrices to diagonalise: `n × n` per image, row-major, `n²` apart; write each `b × b`
    /// problem into its top left corner (the rest stays zero: no rotation ever mixes it in).
    pub fn matrix(&mut self) -> &mut Buffer<f64> {
        self.current = 0;
        &mut self.x[0]
    }

    /// Sweeps the last [`RitzSolver::solve`] took.
    pub fn sweeps(&self) -> usize {
        self.sweeps
    }

    /// Threads per block of every block Jacobi kernel.
    fn threads(device: &Device) -> u32 {
        if device.backend() == Backend::Gpu { 256 } else { 64 }
    }

    /// One sweep: every pair of block rows meets once (`2·pairs − 1` rounds). Returns whether any
    /// image rotated (a wait for the queue).
    fn sweep(&mut self, device: &Device) -> Result<bool> {
        let (n, nb, images) = (self.n, self.nb, self.images);
        let pairs = n / (2 * nb);
        let threads = Self::threads(device);
        let rotations_cfg = LaunchConfig {
            grid: Dim3 { x: pairs as u32, y: 1, z: images as u32 },
            block: Dim3::x(threads),
            shared_bytes: kf::block_jacobi_rotations_bytes(nb as u32),
        };
        let apply_cfg = LaunchConfig {
            grid: Dim3 { x: pairs as u32, y: pairs as u32, z: images as u32 },
            block: Dim3::x(threads),
            shared_bytes: kf::block_jacobi_apply_bytes(nb as u32),
        };
        let (n32, nb32) = (n as u32, nb as u32);
        let q = device.queue();
        device.upload_into(&mut self.rotated, &vec![0; images])?;
        for round in 0..2 * pairs as u32 - 1 {
            let (x_src, x_dst) = split_pair(&mut self.x, self.current);
            let (z_src, z_dst) = split_pair(&mut self.z, self.current);
            // SAFETY: the buffers belong to `self`, alive until the download below waits for the
            // queue; each kernel indexes through checked slices but the rotations' work space,
            // which the launch's shared memory holds.
            unsafe {
                device.launch_on(
                    q,
                    &kf::BLOCK_JACOBI_ROTATIONS,
                    rotations_cfg,
                    (x_src, n32, nb32, round, &mut self.rot, &mut self.rotated),
                )?;
                device.launch_on(
                    q,
                    &kf::BLOCK_JACOBI_APPLY,
                    apply_cfg,
                    (x_src, n32, nb32, round, &self.rot, 1u32, x_dst),
                )?;
                device.launch_on(
                    q,
                    &kf::BLOCK_JACOBI_APPLY,
                    apply_cfg,
                    (z_src, n32, nb32, round, &self.rot, 0u32, z_dst),
                )?;
            }
            self.current = 1 - self.current;
        }
        Ok(device.download(&self.rotated)?.iter().any(|&r| r != 0))
    }
}

impl RitzSolver for BlockJacobi {
    fn input(&mut self) -> Result<(BufferViewMut<'_, f64>, Layout)> {
        let n = self.n as u32;
        Ok((self.matrix().view_mut(..)?, Layout::row_major(n, n * n)))
    }

    unsafe fn solve(&mut self, device: &Device, pairs: &mut RitzPairs) -> Result<()> {
        let fill_cfg = LaunchConfig {
            grid: Dim3 { x: (self.n * self.n).div_ceil(256).min(1024) as u32, y: 1, z: self.images as u32 },
            block: Dim3::x(256),
            shared_bytes: 0,
        };
        let n32 = self.n as u32;
        // SAFETY: `z` belongs to `self`, alive until the first sweep's download waits.
        unsafe { device.launch(&kf::SET_IDENTITY, fill_cfg, (&mut self.z[0], n32))? };
        self.sweeps = 0;
        loop {
            self.sweeps += 1;
            if !self.sweep(device)? {
                break;
            }
            if self.sweeps >= BLOCK_JACOBI_SWEEPS {
                return Err(Error::Numerical(format!(
                    "the block Jacobi eigensolver did not converge in {BLOCK_JACOBI_SWEEPS} sweeps ({b} × {b})",
                    b = self.b
                )));
            }
        }
        let cur = self.current;
        let values = (self.x[cur].view(..)?, Layout::row_major(n32, n32 * n32));
        let vectors = (self.z[cur].view(..)?, Layout::row_major(n32, n32 * n32));
        // SAFETY: the matrix and vectors belong to `self`, every image's part inside them; the
        // pairs live as the caller promises.
        unsafe { self.ordering.write(device, values, vectors, pairs) }
    }
}

/// The buffer `cur` of a pair to read and the other to write.
fn split_pair(pair: &mut [Buffer<f64>; 2], cur: usize) -> (&Buffer<f64>, &mut Buffer<f64>) {
    let (first, second) = pair.split_at_mut(1);
    if cur == 0 { (&first[0], &mut second[0]) } else { (&second[0], &mut first[0]) }
}
