//! Cholesky QR's small step: per image, the inverse `R⁻¹` of the Cholesky factor of a `b × b` Gram
//! matrix, by the plan's [`CholeskyMethod`] ([`inverse_cholesky_factor`]): the packed triangle in
//! one block per image ([`kf::cholesky_inverse_packed`]) where it fits in shared memory, else in
//! panels over many blocks ([`blocked_cholesky_inverse`], `kernels::svd_factor::blocked_cholesky`).

use super::plan::{CholeskyMethod, Plan};
use crate::launch::device::{Backend, Buffer, Device, Queue};
use crate::launch::error::{Result, ensure};
use gpu_std::sim::{Dim3, LaunchConfig};
use kernels::svd_factor as kf;

/// Panel rows of [`blocked_cholesky_inverse`]: 64 on a GPU (a panel is one GEMM tile); 16 in
/// the simulator, so that its tests on small matrices take several panels.
pub fn cholesky_panel_rows(device: &Device) -> usize {
    match device.backend() {
        Backend::Gpu => kf::CHOLESKY_PANEL_MAX as usize,
        _ => 16,
    }
}

/// Cholesky QR's small step by `plan.cholesky` for `plan.images` Gram matrices of `plan.b × plan.b`
/// (row-major, upper triangle read) in `gram`: `R⁻¹` (upper triangular) into `rinv`. `scratch`
/// holds [`kf::eigen_scratch`]`(b)` values per image; the blocked method overwrites `gram`'s upper
/// triangle with `R`. Queued on the device's queue, no wait.
///
/// # Safety
/// The buffers must live until the queue reaches the launches (as for [`Device::launch`]).
pub unsafe fn inverse_cholesky_factor(
    device: &Device,
    plan: &Plan,
    (gram, rinv, scratch): (&mut Buffer<f64>, &mut Buffer<f64>, &mut Buffer<f64>),
) -> Result<()> {
    let (b, images) = (plan.b, plan.images);
    let len = images * b * b;
    ensure(
        gram.len() >= len
            && rinv.len() >= len
            && scratch.len() >= images * kf::eigen_scratch(b as u32) as usize,
        || format!("Cholesky QR step of {images} matrices of {b} × {b}: buffers too small"),
    )?;
    // SAFETY: forwarded from the caller; each image's `b²` values lie inside the buffers (checked
    // above), and the kernels take their launches from the plan.
    unsafe {
        match plan.cholesky {
            CholeskyMethod::OneBlock => device.launch(
                &kf::CHOLESKY_INVERSE,
                plan.one_block_config(),
                (&*gram, b as u32, scratch, rinv),
            ),
            CholeskyMethod::Packed => device.launch(
                &kf::CHOLESKY_INVERSE_PACKED,
                plan.packed_cholesky_config(),
                (&*gram, b as u32, plan.near_identity, rinv),
            ),
            CholeskyMethod::Blocked => blocked_cholesky_inverse(
                device,
                device.queue(),
                (gram, rinv, scratch),
                (b, images, plan.cholesky_panel_rows),
                plan.near_identity,
            ),
        }
    }
}

/// Cholesky QR's small step for any `b`, on the device over many blocks
/// (`kernels::svd_factor::blocked_cholesky`): per image, `rinv = R⁻¹` (`b × b`, row-major, upper
/// triangular) for the Gram matrix `w = RᵀR` (`b × b`, row-major, upper triangle read), pivots
/// floored as [`kf::cholesky_inverse`] floors them. `w`'s upper triangle is overwritten with `R`,
/// except where `w` is within `near_identity/b` of the identity (then `R⁻¹` is `I − U` to first
/// order and the other kernels skip the image: [`kf::cholesky_near_identity`]; 0 turns it off); `w`'s
/// strict lower triangle and `diagonal` (`images·(b + 1)` values) are work space. Queued on
/// `queue`: `3·⌈b/nb⌉ − 1` launches for the factor (panels of `nb` rows, at most
/// [`kf::CHOLESKY_PANEL_MAX`]; the plan's [`cholesky_panel_rows`]) and 2 per level of the
/// inverse's recursive doubling (`⌈log₂⌈b/nb⌉⌉`), each for every image, and no wait.
///
/// # Safety
/// The buffers must live until the queue reaches the launches (as for [`Device::launch_on`]).
pub unsafe fn blocked_cholesky_inverse(
    device: &Device,
    queue: &Queue,
    (w, rinv, diagonal): (&mut Buffer<f64>, &mut Buffer<f64>, &mut Buffer<f64>),
    (b, images, nb): (usize, usize, usize),
    near_identity: f64,
) -> Result<()> {
    let len = images * b * b;
    ensure((1..=kf::CHOLESKY_PANEL_MAX as usize).contains(&nb), || {
        format!("blocked Cholesky with panels of {nb} rows: 1 to {}", kf::CHOLESKY_PANEL_MAX)
    })?;
    ensure(
        b > 0 && images > 0 && w.len() >= len && rinv.len() >= len && diagonal.len() >= images * (b + 1),
        || {
            format!(
                "blocked Cholesky of {images} matrices of {b} × {b}: buffers of {}, {} and {} values",
                w.len(),
                rinv.len(),
                diagonal.len()
            )
        },
    )?;
    let panels = b.div_ceil(nb);
    let config = |blocks: usize| LaunchConfig {
        grid: Dim3 { x: blocks as u32, y: 1, z: images as u32 },
        block: Dim3::x(kf::BLOCKED_CHOLESKY_THREADS),
        shared_bytes: kf::BLOCKED_CHOLESKY_SHARED_BYTES,
    };
    let (b32, nb32) = (b as u32, nb as u32);
    let near_identity_config = LaunchConfig {
        grid: Dim3 { x: b.div_ceil(kf::NEAR_IDENTITY_ROWS as usize) as u32, y: 1, z: images as u32 },
        block: Dim3::x(32 * kf::NEAR_IDENTITY_ROWS),
        shared_bytes: 0,
    };
    device.zero_on(queue, diagonal.view_mut(..images * (b + 1))?)?;
    // SAFETY: as below.
    unsafe {
        device.launch_on(
            queue,
            &kf::CHOLESKY_DISTANCE_TO_IDENTITY,
            near_identity_config,
            (&*w, &mut *diagonal, b32),
        )?;
        device.launch_on(
            queue,
            &kf::CHOLESKY_NEAR_IDENTITY,
            near_identity_config,
            (&*w, &mut *rinv, &mut *diagonal, b32, near_identity),
        )?;
    }
    for panel in 0..panels {
        let right = b - (b.min((panel + 1) * nb));
        // SAFETY: forwarded from the caller; the kernels index through checked slices, each
        // image's `b²` values inside the buffers (checked above).
        unsafe {
            device.launch_on(
                queue,
                &kf::CHOLESKY_DIAGONAL_BLOCK,
                config(1),
                (&mut *w, &mut *rinv, &mut *diagonal, b32, nb32, panel as u32),
            )?;
            if right > 0 {
                let tiles = right.div_ceil(kf::GEMM_TILE as usize);
                device.launch_on(
                    queue,
                    &kf::CHOLESKY_ROW_PANEL,
                    config(tiles),
                    (&mut *w, &*rinv, &*diagonal, b32, nb32, panel as u32),
                )?;
                let trailing = LaunchConfig {
                    grid: Dim3 { x: tiles as u32, y: tiles as u32, z: images as u32 },
                    ..config(1)
                };
                device.launch_on(
                    queue,
                    &kf::CHOLESKY_TRAILING_UPDATE,
                    trailing,
                    (&mut *w, &*diagonal, b32, nb32, panel as u32),
                )?;
            }
        }
    }
    let mut level = 0u32;
    while nb << level < b {
        let span = (nb << level) as u32;
        let tiles = span.div_ceil(kf::GEMM_TILE);
        let pairs = kf::level_pairs(b32, span) as usize;
        let level_config =
            LaunchConfig { grid: Dim3 { x: tiles, y: tiles, z: (images * pairs) as u32 }, ..config(1) };
        // SAFETY: as above.
        unsafe {
            device.launch_on(
                queue,
                &kf::TRIANGULAR_INVERSE_PRODUCT,
                level_config,
                (&mut *w, &mut *rinv, &*diagonal, b32, nb32, level),
            )?;
            device.launch_on(
                queue,
                &kf::TRIANGULAR_INVERSE_BLOCK,
                level_config,
                (&*w, &mut *rinv, &*diagonal, b32, nb32, level),
            )?;
        }
        level += 1;
    }
    Ok(())
}
