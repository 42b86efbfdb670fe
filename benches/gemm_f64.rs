//! f64 GEMM benchmark (GPU only): `cargo bench --bench gemm_f64` — the engine's products on the
//! shapes of `../shared/peers/linalg_peers.py` (cuBLAS through torch.matmul; run it in the same
//! call), the 64 × 64 tensor-core kernel (`gemm_f64_mma_to`, mma m8n8k4) against the pipelined
//! ones (`gemm_f64_pipelined_to`, 128 × 64 tiles and 4 warps, and `gemm_f64_pipelined_wide_to`,
//! 128 × 128 and 8 warps: 4-stage cp.async, mma m16n8k4, split-K with `gemm_f64_split_sum_to`
//! where the host's `Gemms` splits; "host's choice" marks the width `Gemms` picks).
//!
//! `C = op(A)·B` with `A` stored `k × m` and read transposed for the peer's transposed rows (the
//! Gram matrix `AᵀA` and `QᵀY`), else `m × k`; `B` `k × n`; `C` `m × n`, all row-major. The
//! transposed rows are symmetric products in the engine: they are timed both ways, "sym" (`B = A`,
//! only the upper blocks computed and mirrored, as the engine does) and "full" (like cuBLAS).
//! TFLOP/s is `2·m·n·k / time` in every row, as the peer counts it (so a symmetric row's rate is
//! effective, twice its arithmetic). Device time between two events around each launch (and the
//! split's sum and temporary buffer), median of 15 after 3 warm-ups. The last column checks the
//! pipelined result against the old kernel's: max |Δ| / max |C|.
//!
//! `-- --shapes 4`: only the four shapes of the GEMM target (G 4096², G·Q and QᵀY at
//! n = 4096, b = 512, Q·Z).

use kernel_suite::bench::{Stats, Table};
use kernel_suite::{Buffer, Device, Dim3, LaunchConfig};
use kernels::svd_factor::{self as kf, Layout};

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The peer's GEMM rows: (name, m, n, k, A transposed).
const SHAPES: &[(&str, usize, usize, usize, bool)] = &[
    ("G = AᵀA, 512² image", 512, 512, 512, true),
    ("G = AᵀA, 2048² image", 2048, 2048, 2048, true),
    ("G = AᵀA, 4096² image", 4096, 4096, 4096, true),
    ("G·Q, n = 512, b = 200", 512, 200, 512, false),
    ("G·Q, n = 2048, b = 104", 2048, 104, 2048, false),
    ("G·Q, n = 4096, b = 200", 4096, 200, 4096, false),
    ("G·Q, n = 4096, b = 512", 4096, 512, 4096, false),
    ("QᵀY, n = 512, b = 200", 200, 200, 512, true),
    ("QᵀY, n = 4096, b = 200", 200, 200, 4096, true),
    ("QᵀY, n = 4096, b = 512", 512, 512, 4096, true),
    ("Q·Z, n = 4096, b = 512", 4096, 512, 512, false),
];

/// The four target shapes (indices into [`SHAPES`]).
const TARGET: &[usize] = &[2, 6, 9, 10];

const WARM_UP: usize = 3;
const RUNS: usize = 15;

fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    let sms = device.multiprocessors()?;
    println!("device: {} ({sms} SMs)", device.describe());
    let only_target = std::env::args().any(|a| a == "4") && std::env::args().any(|a| a == "--shapes");
    println!("\n## f64 GEMM, C = op(A)·B (device time, median of {RUNS} after {WARM_UP} warm-ups)\n");
    let mut table = Table::new(&[
        "product",
        "m × n × k",
        "kernel",
        "mode",
        "splits",
        "median ms",
        "min ms",
        "TFLOP/s (2mnk/t)",
        "max |Δ|/max |C| vs old",
    ]);
    for (index, &(name, m, n, k, transposed)) in SHAPES.iter().enumerate() {
        if only_target && !TARGET.contains(&index) {
            continue;
        }
        let a_host: Vec<f64> = (0..m * k).map(|e| value(e, 1)).collect();
        let b_host: Vec<f64> = (0..k * n).map(|e| value(e, 2)).collect();
        let a = device.upload(&a_host)?;
        let b = device.upload(&b_host)?;
        let mut c_old = device.alloc::<f64>(m * n)?;
        let mut c_new = device.alloc::<f64>(m * n)?;
        let la = if transposed {
            Layout::row_major(m as u32, (k * m) as u32).transposed()
        } else {
            Layout::row_major(k as u32, (m * k) as u32)
        };
        let lb = Layout::row_major(n as u32, (k * n) as u32);
        let lc = Layout::row_major(n as u32, (m * n) as u32);
        let flops = 2.0 * (m * n * k) as f64;
        // The modes: symmetric (B = A, upper blocks) for the transposed rows, and the full product.
        let modes: &[bool] = if transposed && m == n { &[true, false] } else { &[false] };
        for &symmetric in modes {
            let b_op = if symmetric { &a } else { &b };
            let lb_op = if symmetric { Layout::row_major(m as u32, (k * m) as u32) } else { lb };
            let mode = if symmetric { "sym" } else { "full" };
            let old = time(&device, || {
                let cfg = LaunchConfig {
                    grid: Dim3 { x: n.div_ceil(64) as u32, y: m.div_ceil(64) as u32, z: 1 },
                    block: Dim3::x(kf::GEMM_THREADS),
                    shared_bytes: kf::GEMM_SHARED_BYTES,
                };
                let none: Option<&Buffer<f64>> = None;
                let args = (
                    &a,
                    la,
                    b_op,
                    lb_op,
                    &mut c_old,
                    lc,
                    none,
                    0u32,
                    m as u32,
                    n as u32,
                    k as u32,
                    symmetric as u32,
                );
                // SAFETY: the layouts lie inside the buffers, which outlive the timing's wait.
                unsafe { device.launch(&kf::GEMM_F64_MMA_TO_F64, cfg, args) }?;
                Ok(())
            })?;
            let old_c = device.download(&c_old)?;
            let largest = old_c.iter().fold(0.0f64, |acc, v| acc.max(v.abs()));
            let mut rows = vec![(String::from("old 64×64 m8n8k4"), old, 1, String::from("—"))];
            for wide in [false, true] {
                let bn = if wide { kf::PGEMM_WIDE_TILE_N } else { kf::PGEMM_TILE_N };
                let splits = kf::pgemm_splits(m as u32, n as u32, k as u32, 1, symmetric, sms, bn);
                let new = time(&device, || {
                    // SAFETY: as above; the temporary parts are freed in the queue's order.
                    unsafe {
                        pipelined(
                            &device,
                            (&a, la),
                            (b_op, lb_op),
                            (&mut c_new, lc),
                            (m, n, k),
                            (symmetric, splits, wide),
                        )
                    }
                })?;
                let new_c = device.download(&c_new)?;
                let diff = old_c.iter().zip(&new_c).fold(0.0f64, |acc, (x, y)| acc.max((x - y).abs()));
                let chosen = if kf::pgemm_wide(m as u32, n as u32) == wide { " (host's choice)" } else { "" };
                rows.push((
                    format!("pipelined 128×{bn} m16n8k4{chosen}"),
                    new,
                    splits,
                    format!("{:.1e}", diff / largest),
                ));
            }
            for (kernel, st, parts, check) in &rows {
                table.row(&[
                    name.to_string(),
                    format!("{m} × {n} × {k}"),
                    kernel.clone(),
                    mode.to_string(),
                    parts.to_string(),
                    format!("{:.4}", st.median_ms),
                    format!("{:.4}", st.min_ms),
                    format!("{:.1}", flops / st.median_ms / 1e9),
                    check.clone(),
                ]);
            }
        }
    }
    print!("{}", table.render());
    Ok(())
}

/// A deterministic operand value in `[−1, 1)` for element `e` of operand `which`.
fn value(e: usize, which: u64) -> f64 {
    let mut x = (e as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ which.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 29;
    (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Statistics of `launch`'s device time (events around it) after warm-ups.
fn time(device: &Device, mut launch: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Stats> {
    let mut times = Vec::new();
    for run in 0..WARM_UP + RUNS {
        let t0 = device.mark()?;
        launch()?;
        let t1 = device.mark()?;
        let ms = device.elapsed_ms(&t0, &t1)?;
        if run >= WARM_UP {
            times.push(ms);
        }
    }
    Ok(Stats::of(&times))
}

/// One image's `C = A·B` on a pipelined kernel (128 × 128 tiles if `wide`, else 128 × 64) as the
/// host's `Gemms` launches it: split in `splits` parts summed by the second kernel when
/// `splits > 1`.
///
/// # Safety
/// The layouts lie inside the buffers, which live until the queue has run the launches.
unsafe fn pipelined(
    device: &Device,
    (a, la): (&Buffer<f64>, Layout),
    (b, lb): (&Buffer<f64>, Layout),
    (c, lc): (&mut Buffer<f64>, Layout),
    (m, n, k): (usize, usize, usize),
    (symmetric, splits, wide): (bool, u32, bool),
) -> anyhow::Result<()> {
    let (kernel, bn, threads, shared_bytes) = if wide {
        (
            &kf::GEMM_F64_PIPELINED_WIDE_TO_F64,
            kf::PGEMM_WIDE_TILE_N,
            kf::PGEMM_WIDE_THREADS,
            kf::PGEMM_WIDE_SHARED_BYTES,
        )
    } else {
        (&kf::GEMM_F64_PIPELINED_TO_F64, kf::PGEMM_TILE_N, kf::PGEMM_THREADS, kf::PGEMM_SHARED_BYTES)
    };
    let config = |parts: usize| LaunchConfig {
        grid: Dim3 {
            x: n.div_ceil(bn as usize) as u32,
            y: m.div_ceil(kf::PGEMM_TILE_M as usize) as u32,
            z: parts as u32,
        },
        block: Dim3::x(threads),
        shared_bytes,
    };
    let none: Option<&Buffer<f64>> = None;
    let (m32, n32, k32) = (m as u32, n as u32, k as u32);
    if splits <= 1 {
        let args = (a, la, b, lb, c, lc, none, 0u32, m32, n32, k32, kf::pgemm_mode(symmetric, 1));
        // SAFETY: forwarded from the caller.
        unsafe { device.launch(kernel, config(1), args)? };
        return Ok(());
    }
    let parts = splits as usize;
    let mut partial = device.alloc_temporary::<f64>(device.queue(), parts * m * n)?;
    let lp = Layout::row_major(n32, m32 * n32);
    let args = (a, la, b, lb, &mut partial, lp, none, 0u32, m32, n32, k32, kf::pgemm_mode(symmetric, splits));
    let sum_config = LaunchConfig {
        grid: Dim3 { x: kf::split_sum_blocks(m32, n32), y: 1, z: 1 },
        block: Dim3::x(kf::SPLIT_SUM_THREADS),
        shared_bytes: kf::SPLIT_SUM_SHARED_BYTES,
    };
    // SAFETY: forwarded from the caller; `partial` holds the parts and is freed after the sum in
    // the queue's order.
    unsafe {
        device.launch(kernel, config(parts), args)?;
        device.launch(
            &kf::GEMM_F64_SPLIT_SUM_TO_F64,
            sum_config,
            (&partial, splits, c, lc, none, 0u32, m32, n32, symmetric as u32),
        )?;
    }
    Ok(())
}
