//! GPU SVD benchmarks (GPU only): `cargo bench --bench svd_factor` (`-- --one-image`: only the
//! single images' table; `-- --batches`: only the batches'; `-- --ritz`: only the Ritz
//! eigensolvers' table; `-- --cholesky`: only Cholesky QR's small step's table). Environment
//! variables (below) force a solver or method, pick one workload, or print the kernels' profile.
//!
//! Batches of the workloads (64 × 256², 16 × 1024², 8 × 2048², one 4096²) of procedural
//! photo-like images, `k = 50` (256 for 4096²), and 16 × 1024² of white noise (a flat spectrum): the device time of the whole factorisation
//! ([`svd_factor::factor`]: Gram matrix, iterations, triplets) as a median of event-timed runs after
//! a warm-up, its iterations, and the largest singular value error against faer (f64) on the
//! first image.

use kernel_suite::bench::{Stats, Table};
use kernel_suite::svd::thin_svd;
use kernel_suite::svd_factor::{self, CholeskyMethod, GramMethod, Plan, RitzMethod, launch_f32_to_f64};
use kernel_suite::{Device, Dim3, LaunchConfig, workload};
use kernels::svd_factor::{self as kf, Layout};

fn main() -> std::process::ExitCode {
    kernel_suite::bench::run(measure)
}

/// The benchmark; without a GPU, or on any failure, its error as one line (`bench::run`).
fn measure() -> anyhow::Result<()> {
    let device = Device::gpu(0, &kernel_suite::KERNELS)?;
    println!("device: {}", device.describe());
    // `SVD_FACTOR_PROFILE=1`: one run per workload with the nvprof-style profile of every kernel.
    let profile = std::env::var("SVD_FACTOR_PROFILE").is_ok_and(|v| v == "1");
    if profile {
        device.enable_profiling()?;
    }
    // `--ritz`: only the table of the Ritz eigensolvers alone.
    if std::env::args().any(|a| a == "--ritz") {
        return ritz_solvers(&device);
    }
    // `--cholesky`: only the table of Cholesky QR's small step alone.
    if std::env::args().any(|a| a == "--cholesky") {
        return cholesky_steps(&device);
    }
    println!("\n## GPU SVD of a batch (device time, median of 5 after 1 warm-up)\n");
    let mut table = Table::new(&[
        "workload",
        "k",
        "iterations (Rayleigh–Ritz, filter)",
        "median ms",
        "min ms",
        "ms per image",
        "max |Δσ|/σ₁ (image 0)",
    ]);
    // (images, size, k, white noise instead of photo-like images)
    let workloads: &[(usize, usize, usize, bool)] = &[
        (1, 512, 100, false),
        (64, 256, 50, false),
        (256, 512, 20, false),
        (16, 1024, 50, false),
        (16, 1024, 50, true),
        (1, 2048, 50, false),
        (8, 2048, 50, false),
        (8, 2048, 256, false),
        (1, 4096, 100, false),
        (1, 4096, 256, false),
    ];
    // `SVD_FACTOR_WORKLOAD=1x2048x50` (images × size × k; `…n` for noise): that workload alone
    // (with `SVD_FACTOR_PROFILE=1`, its kernels' profile).
    let only = std::env::var("SVD_FACTOR_WORKLOAD").ok();
    let workloads = workloads.iter().filter(|(count, size, k, noise)| {
        only.as_ref().is_none_or(|o| *o == format!("{count}x{size}x{k}{}", if *noise { "n" } else { "" }))
    });
    // `SVD_FACTOR_CHOLESKY=one-block|packed|blocked`: every factorisation's Cholesky QR by that
    // kernel, where it applies (one-block and packed where their work space fits).
    let forced_cholesky = match std::env::var("SVD_FACTOR_CHOLESKY").ok().as_deref() {
        None => None,
        Some("one-block") => Some(CholeskyMethod::OneBlock),
        Some("packed") => Some(CholeskyMethod::Packed),
        Some("blocked") => Some(CholeskyMethod::Blocked),
        Some(other) => anyhow::bail!("SVD_FACTOR_CHOLESKY={other}: one-block, packed or blocked"),
    };
    // `SVD_FACTOR_NEAR_IDENTITY=0`: every Cholesky QR pass factors its Gram matrix, also one near
    // the identity (no first-order shortcut).
    let no_shortcut = std::env::var("SVD_FACTOR_NEAR_IDENTITY").is_ok_and(|v| v == "0");
    // `SVD_FACTOR_PRODUCTS=N`: N products with `G` before the first Rayleigh–Ritz step.
    let products = match std::env::var("SVD_FACTOR_PRODUCTS") {
        Ok(v) => Some(v.parse::<usize>().map_err(|e| anyhow::anyhow!("SVD_FACTOR_PRODUCTS={v}: {e}"))?),
        Err(_) => None,
    };
    // `SVD_FACTOR_B=N`: subspace iteration on N columns (at least k).
    let subspace = match std::env::var("SVD_FACTOR_B") {
        Ok(v) => Some(v.parse::<usize>().map_err(|e| anyhow::anyhow!("SVD_FACTOR_B={v}: {e}"))?),
        Err(_) => None,
    };
    let panel_rows = panel_rows_knob()?;
    // The device time of `factor` by `method` (None: the plan's choice):
    // median and min of the runs after the first, the last run's factors and the first image.
    let time =
        |count: usize, size: usize, k: usize, noise: bool, method: Option<GramMethod>| -> anyhow::Result<_> {
            let image = if noise { workload::noise_image } else { workload::procedural_image };
            let images: Vec<_> =
                (0..count).map(|i| image(i as u64, size, size).mapv(|v| v as f32 / 255.0)).collect();
            let host: Vec<f32> = images.iter().flat_map(|i| i.iter().copied()).collect();
            let raw = device.upload(&host)?;
            let mut a = device.alloc::<f64>(host.len())?;
            // SAFETY: both buffers live until `factor` has downloaded its results.
            unsafe { launch_f32_to_f64(&device, device.queue(), raw.view(..)?, a.view_mut(..)?)? };
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..if profile { 2 } else { 6 } {
                let t0 = device.mark()?;
                let mut plan = match (method, subspace) {
                    (Some(method), _) => Plan::with_method(&device, (size, size), count, k, method)?,
                    (None, Some(b)) => Plan::with_subspace(
                        &device,
                        (size, size),
                        count,
                        (k, b.max(k)),
                        GramMethod::SubspaceIteration,
                    )?,
                    (None, None) => Plan::new(&device, (size, size), count, k)?,
                };
                if let Some(cholesky) = forced_cholesky {
                    plan.cholesky = cholesky;
                }
                if no_shortcut {
                    plan.near_identity = 0.0;
                }
                if let Some(products) = products {
                    plan.products_before_rayleigh_ritz = products;
                }
                if let Some(rows) = panel_rows {
                    plan.cholesky_panel_rows = rows;
                }
                let f = svd_factor::factor_with(&device, &a, &plan)?;
                let t1 = device.mark()?;
                times.push(device.elapsed_ms(&t0, &t1)?);
                last = Some(f);
            }
            let first = images.into_iter().next().expect("at least one image");
            Ok((Stats::of(&times[1..]), last.expect("six runs"), first))
        };
    // `--one-image`: only the table of single images below.
    let one_image = std::env::args().any(|a| a == "--one-image");
    for &(count, size, k, noise) in workloads.filter(|_| !one_image) {
        let (st, f, first) = time(count, size, k, noise, None)?;
        let reference = thin_svd(first.view())?;
        let err =
            f.singular_values[0].iter().zip(&reference.s).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
                / reference.s[0];
        table.row(&[
            format!("{count} × {size}²{}", if noise { " noise" } else { "" }),
            k.to_string(),
            format!("{} ({}, {})", f.iterations, f.rayleigh_ritz_steps, f.filter_steps),
            format!("{:.2}", st.median_ms),
            format!("{:.2}", st.min_ms),
            format!("{:.3}", st.median_ms / count as f64),
            format!("{err:.1e}"),
        ]);
    }
    print!("{}", table.render());
    if profile {
        if let Some(report) = device.profile_report()? {
            print!("{report}");
        }
        return Ok(());
    }
    // `--batches`: only the table above.
    if std::env::args().any(|a| a == "--batches") {
        return Ok(());
    }
    // The iteration's f64 products, FMA against tensor cores: the Gram matrix of one 4096² image,
    // and G·Q with b = 512 (4096² at k = 256) and b = 104 (16 × 1024² at k = 50).
    println!("\n## f64 GEMM kernels (device time, median of 10 after 1 warm-up)\n");
    let mut table = Table::new(&["product", "kernel", "median ms", "TFLOP/s"]);
    for &(label, (m, n, k), images, symmetric) in &[
        ("Gram AᵀA, 1 × 4096²", (4096, 4096, 4096), 1, true),
        ("G·Q, 4096 × 4096 · 512", (4096, 512, 4096), 1, false),
        ("G·Q, 16 × 1024 × 1024 · 104", (1024, 104, 1024), 16, false),
    ] {
        let a = device.upload(&vec![0.5f64; images * m * k])?;
        let b = device.upload(&vec![0.25f64; images * k * n])?;
        let mut c = device.alloc::<f64>(images * m * n)?;
        let la = Layout::row_major(k as u32, (m * k) as u32);
        let lb = Layout::row_major(n as u32, (k * n) as u32);
        let lc = Layout::row_major(n as u32, (m * n) as u32);
        let cfg = LaunchConfig {
            grid: Dim3 { x: n.div_ceil(64) as u32, y: m.div_ceil(64) as u32, z: images as u32 },
            block: Dim3::x(kf::GEMM_THREADS),
            shared_bytes: kf::GEMM_SHARED_BYTES,
        };
        let flops = 2.0 * (images * m * n * k) as f64 * if symmetric { 0.5 } else { 1.0 };
        for (name, kernel) in [("FMA", &kf::GEMM_F64_TO_F64), ("tensor cores", &kf::GEMM_F64_MMA_TO_F64)] {
            let mut times = Vec::new();
            for _ in 0..11 {
                let t0 = device.mark()?;
                let none: Option<&kernel_suite::Buffer<f64>> = None;
                let args =
                    (&a, la, &b, lb, &mut c, lc, none, 0u32, m as u32, n as u32, k as u32, symmetric as u32);
                // SAFETY: the layouts lie inside the buffers, which outlive the wait below.
                unsafe { device.launch(kernel, cfg, args)? };
                let t1 = device.mark()?;
                times.push(device.elapsed_ms(&t0, &t1)?);
            }
            let st = Stats::of(&times[1..]);
            table.row(&[
                label.to_string(),
                name.to_string(),
                format!("{:.3}", st.median_ms),
                format!("{:.1}", flops / st.median_ms / 1e9),
            ]);
        }
    }
    print!("{}", table.render());
    // One image or a few: subspace iteration against every eigenpair of G at once, each forced,
    // with each one's σ against faer's (the plan's choice marked).
    println!(
        "\n## One image or a few: subspace iteration or the whole eigendecomposition of G (device time, median of 5)\n"
    );
    let mut table = Table::new(&[
        "workload",
        "k",
        "method",
        "iterations (Rayleigh–Ritz, filter)",
        "median ms",
        "min ms",
        "max |Δσ|/σ₁ vs faer (image 0)",
    ]);
    let cases: &[(usize, usize, usize, bool)] = &[
        (1, 256, 20, false),
        (1, 256, 100, false),
        (16, 256, 50, false),
        (1, 512, 20, false),
        (1, 512, 50, false),
        (1, 512, 100, false),
        (1, 512, 100, true),
        (1, 512, 200, false),
        (4, 512, 100, false),
        (16, 512, 100, false),
        (1, 768, 100, false),
        (1, 1024, 50, false),
        (1, 1024, 100, false),
        (1, 1024, 256, false),
    ];
    for &(count, size, k, noise) in cases {
        let chosen = Plan::new(&device, (size, size), count, k)?.method;
        for method in [GramMethod::SubspaceIteration, GramMethod::WholeEigendecomposition] {
            let (st, f, first) = time(count, size, k, noise, Some(method))?;
            let reference = thin_svd(first.view())?;
            let err =
                f.singular_values[0].iter().zip(&reference.s).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
                    / reference.s[0];
            table.row(&[
                format!("{count} × {size}²{}", if noise { " noise" } else { "" }),
                k.to_string(),
                format!("{method:?}{}", if method == chosen { " (plan)" } else { "" }),
                format!("{} ({}, {})", f.iterations, f.rayleigh_ritz_steps, f.filter_steps),
                format!("{:.2}", st.median_ms),
                format!("{:.2}", st.min_ms),
                format!("{err:.1e}"),
            ]);
        }
    }
    print!("{}", table.render());
    Ok(())
}

/// `SVD_FACTOR_PANEL_ROWS=N`: the blocked Cholesky's panels of N rows (1 to 64) instead of the
/// plan's.
fn panel_rows_knob() -> anyhow::Result<Option<usize>> {
    match std::env::var("SVD_FACTOR_PANEL_ROWS") {
        Ok(v) => {
            let rows = v.parse::<usize>().map_err(|e| anyhow::anyhow!("SVD_FACTOR_PANEL_ROWS={v}: {e}"))?;
            anyhow::ensure!(
                (1..=kf::CHOLESKY_PANEL_MAX as usize).contains(&rows),
                "SVD_FACTOR_PANEL_ROWS={v}: 1 to {}",
                kf::CHOLESKY_PANEL_MAX
            );
            Ok(Some(rows))
        }
        Err(_) => Ok(None),
    }
}

/// Cholesky QR's small step alone (`-- --cholesky`): `R⁻¹` of the Gram matrices of random
/// `(2b + 9) × b` bases, by every [`CholeskyMethod`] whose work space fits, for one image at
/// b = 64 … 239 and batches of 16 and 64: device time of the step (the blocked method's input
/// restored before each run, outside the timing), median of 20 after 3 warm-ups, and the largest
/// `|R⁻¹ − R⁻¹_packed|` relative to `max |R⁻¹|`.
fn cholesky_steps(device: &Device) -> anyhow::Result<()> {
    use rand::{Rng, SeedableRng};
    println!("\n## Cholesky QR's small step alone (device time, median of 20 after 3 warm-ups)\n");
    let mut table = Table::new(&["images × b", "method", "median ms", "min ms", "max |Δ| vs packed"]);
    let cases: &[(usize, usize)] = &[
        (1, 64),
        (1, 104),
        (1, 128),
        (1, 200),
        (1, 232),
        (1, 320),
        (1, 384),
        (1, 512),
        (8, 512),
        (16, 104),
        (16, 200),
        (64, 104),
    ];
    for &(images, b) in cases {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(b as u64);
        let x = faer::Mat::<f64>::from_fn(2 * b + 9, b, |_, _| rng.random_range(-1.0..1.0));
        let gram = x.transpose() * &x;
        let host: Vec<f64> = (0..images * b * b).map(|e| gram[((e / b) % b, e % b)]).collect();
        let source = device.upload(&host)?;
        let mut plan = Plan::new(device, (b, b), images, b / 2)?;
        anyhow::ensure!(plan.b == b, "plan's b = {} for {b}", plan.b);
        if let Some(rows) = panel_rows_knob()? {
            plan.cholesky_panel_rows = rows;
        }
        let mut gram = device.upload(&host)?;
        let mut rinv = device.alloc::<f64>(images * b * b)?;
        let mut scratch = device.alloc::<f64>(images * kf::eigen_scratch(b as u32) as usize)?;
        let mut packed: Option<Vec<f64>> = None;
        let max_shared = device.max_shared_bytes_per_block()?;
        for method in [CholeskyMethod::Packed, CholeskyMethod::Blocked, CholeskyMethod::OneBlock] {
            let fits = match method {
                CholeskyMethod::Packed => b as u32 <= kf::cholesky_packed_max_b(max_shared),
                CholeskyMethod::OneBlock => plan.one_block_shared_bytes > 8,
                CholeskyMethod::Blocked => true,
            };
            if !fits {
                continue;
            }
            plan.cholesky = method;
            let mut times = Vec::new();
            for _ in 0..23 {
                device.copy_view(device.queue(), source.view(..)?, gram.view_mut(..)?)?;
                let t0 = device.mark()?;
                // SAFETY: the buffers live until the download below waits for the queue.
                unsafe {
                    svd_factor::inverse_cholesky_factor(device, &plan, (&mut gram, &mut rinv, &mut scratch))?
                };
                let t1 = device.mark()?;
                times.push(device.elapsed_ms(&t0, &t1)?);
            }
            let got = device.download(&rinv)?;
            let scale = got.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
            let diff = packed
                .as_ref()
                .map_or(0.0, |p| p.iter().zip(&got).map(|(a, g)| (a - g).abs()).fold(0.0, f64::max) / scale);
            if method == CholeskyMethod::Packed {
                packed = Some(got);
            }
            let st = Stats::of(&times[3..]);
            table.row(&[
                format!("{images} × {b}"),
                format!("{method:?}"),
                format!("{:.4}", st.median_ms),
                format!("{:.4}", st.min_ms),
                format!("{diff:.1e}"),
            ]);
        }
    }
    print!("{}", table.render());
    if let Some(report) = device.profile_report()? {
        println!("\n{report}");
    }
    Ok(())
}

/// The Ritz eigensolvers alone (`-- --ritz`): one `b × b` symmetric matrix at b = 64 … 1024 and
/// batches of 16 at b = 200 and 512, of two spectra (`0.95^i`, decaying like a photograph's
/// Gram matrix, and a random symmetric matrix's), each solver built by the plan: device time of
/// `RitzSolver::solve` (the host solver's includes its copies), median of 10 after 2 warm-ups,
/// and the largest `|θ − θ_host|/|θ_host|₁` against faer's.
fn ritz_solvers(device: &Device) -> anyhow::Result<()> {
    use kernel_suite::svd_factor::{RitzPairs, RitzSolver};
    use rand::{Rng, SeedableRng};
    println!("\n## The Ritz eigensolvers alone (device time of `solve`, median of 10 after 2 warm-ups)\n");
    let mut table =
        Table::new(&["images × b", "spectrum", "solver", "median ms", "min ms", "max |Δθ|/|θ|₁ vs host"]);
    let cases: &[(usize, usize)] = &[
        (1, 64),
        (1, 104),
        (1, 128),
        (1, 200),
        (1, 320),
        (1, 512),
        (1, 1024),
        (16, 104),
        (64, 104),
        (16, 200),
        (16, 512),
    ];
    // `SVD_FACTOR_RITZ=16x512`: that case alone (with `SVD_FACTOR_PROFILE=1`, its kernels' profile).
    let only = std::env::var("SVD_FACTOR_RITZ").ok();
    let cases =
        cases.iter().filter(|(images, b)| only.as_ref().is_none_or(|o| *o == format!("{images}x{b}")));
    for &(images, b) in cases {
        for spectrum in ["0.95^i", "random"] {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(b as u64);
            let one: Vec<f64> = if spectrum == "random" {
                let x: Vec<f64> = (0..b * b).map(|_| rng.random_range(-1.0..1.0)).collect();
                (0..b * b).map(|e| 0.5 * (x[e] + x[(e % b) * b + e / b])).collect()
            } else {
                let q = faer::Mat::<f64>::from_fn(b, b, |_, _| rng.random_range(-1.0..1.0)).qr().compute_Q();
                let t =
                    &q * faer::Mat::<f64>::from_fn(
                        b,
                        b,
                        |i, j| if i == j { 0.95f64.powi(i as i32) } else { 0.0 },
                    ) * q.transpose();
                (0..b * b).map(|e| 0.5 * (t[(e / b, e % b)] + t[(e % b, e / b)])).collect()
            };
            let all: Vec<f64> = (0..images).flat_map(|_| one.iter().copied()).collect();
            let mut reference: Vec<f64> = Vec::new();
            let mut plan = Plan::new(device, (b, b), images, b / 2)?;
            anyhow::ensure!(plan.b == b, "plan's b = {} for {b}", plan.b);
            for method in [
                RitzMethod::Host,
                RitzMethod::Tridiagonal,
                RitzMethod::OneBlockJacobi,
                RitzMethod::BlockJacobi,
            ] {
                if (method == RitzMethod::OneBlockJacobi && plan.one_block_shared_bytes <= 8)
                    || (method == RitzMethod::Tridiagonal && b > kernel_suite::svd_factor::TRIDIAGONAL_MAX_B)
                {
                    continue;
                }
                plan.ritz = method;
                // The tridiagonal solver as it picks its parts (a group of blocks per image where
                // the GPU has the multiprocessors), and with each part another way.
                let variants: Vec<(String, Box<dyn RitzSolver>)> = if method == RitzMethod::Tridiagonal {
                    use kernel_suite::svd_factor::TridiagonalEigensolver as Solver;
                    let picked = Solver::new(device, b, images)?;
                    let one_block = Solver::one_block_reduction(device, b, images)?;
                    let one_block = Solver::with_reduction(device, b, images, one_block)?
                        .with_divide_and_conquer_groups(1)?;
                    let grid_then_one = Solver::new(device, b, images)?.with_divide_and_conquer_groups(1)?;
                    let describe = |s: &Solver| {
                        format!(
                            "Tridiagonal (reduction: {}; divide and conquer: {})",
                            s.describe_reduction(),
                            s.describe_divide_and_conquer()
                        )
                    };
                    // The back-transformation the other way than the solver picks it (beside the
                    // divide and conquer for one image, in place for a batch).
                    let other_back = Solver::new(device, b, images)?
                        .with_overlapped_back_transform(device, images != 1)?;
                    let mut variants: Vec<(String, Box<dyn RitzSolver>)> = vec![
                        (describe(&picked), Box::new(picked)),
                        (describe(&other_back), Box::new(other_back)),
                        (describe(&one_block), Box::new(one_block)),
                        (describe(&grid_then_one), Box::new(grid_then_one)),
                    ];
                    // The two-stage reduction, the band by 8 rows per block (the multiprocessors
                    // shared among the images).
                    if b <= kf::BAND_CHASE_MAX_B as usize {
                        let groups =
                            (b / 8).max(1).min(device.multiprocessors()? as usize / images).max(1) as u32;
                        let launch = Solver::two_stage_reduction(device, b, images, groups)?;
                        let solver = Solver::with_reduction(device, b, images, launch)?;
                        variants.push((describe(&solver), Box::new(solver)));
                    }
                    // One matrix: the divide and conquer by 8 rows per block.
                    if images == 1 && b >= 96 {
                        let groups = (b / 8).min(device.multiprocessors()? as usize) as u32;
                        let solver =
                            Solver::new(device, b, images)?.with_divide_and_conquer_groups(groups)?;
                        variants.push((describe(&solver), Box::new(solver)));
                    }
                    variants
                } else {
                    vec![(format!("{method:?}"), plan.ritz_solver(device)?)]
                };
                for (label, mut solver) in variants {
                    // The problems laid out as the solver reads them (block Jacobi pads them).
                    let (len, layout) = {
                        let (view, layout) = solver.input()?;
                        (view.len(), layout)
                    };
                    let mut laid_out = vec![0.0; len];
                    for (image, row, col) in
                        (0..images).flat_map(|z| (0..b).flat_map(move |i| (0..b).map(move |j| (z, i, j))))
                    {
                        let at = image * layout.batch as usize
                            + row * layout.row as usize
                            + col * layout.col as usize;
                        laid_out[at] = all[image * b * b + row * b + col];
                    }
                    let source = device.upload(&laid_out)?;
                    let mut pairs = RitzPairs::new(device, b, images)?;
                    let mut times = Vec::new();
                    for _ in 0..12 {
                        device.copy_view(device.queue(), source.view(..)?, solver.input()?.0)?;
                        let t0 = device.mark()?;
                        // SAFETY: `pairs` lives until the download below waits for the queue.
                        unsafe { solver.solve(device, &mut pairs)? };
                        let t1 = device.mark()?;
                        times.push(device.elapsed_ms(&t0, &t1)?);
                    }
                    let theta = device.download(&pairs.theta)?;
                    if method == RitzMethod::Host {
                        reference = theta.clone();
                    }
                    let scale = reference.iter().fold(0.0f64, |m, t| m.max(t.abs())).max(1e-300);
                    let diff =
                        theta.iter().zip(&reference).map(|(a, r)| (a - r).abs()).fold(0.0, f64::max) / scale;
                    let st = Stats::of(&times[2..]);
                    table.row(&[
                        format!("{images} × {b}"),
                        spectrum.to_string(),
                        label,
                        format!("{:.3}", st.median_ms),
                        format!("{:.3}", st.min_ms),
                        format!("{diff:.1e}"),
                    ]);
                }
            }
        }
    }
    print!("{}", table.render());
    if let Some(report) = device.profile_report()? {
        println!("\n{report}");
    }
    Ok(())
}
