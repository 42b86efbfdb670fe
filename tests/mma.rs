//! The tensor-core layer (`gpu_std::mma`): fragment layouts against the PTX ISA's tables, each
//! warp-level MMA against a CPU reference (exactly on small integers, within rounding on random
//! values), the f32 → tf32 rounding bit for bit, and `cp.async` with its zero fill. On the simulator,
//! and on the GPU when present, through the probe kernels of `kernels::mma_probe`.

mod common;

use gpu_std::mma;
use gpu_std::{Slice, SliceMut};
use kernel_suite::{Device, LaunchConfig};
use kernels::mma_probe::{
    CP_ASYNC_PROBE, MMA_BF16_PROBE, MMA_F16_PROBE, MMA_F64_PROBE, MMA_TF32_PROBE, TF32_ROUND_PROBE,
    WGMMA_PROBE_SHARED_BYTES, WGMMA_TF32_PROBE,
};
use rand::Rng;
use rand::rngs::SmallRng;

/// One warp.
fn warp() -> LaunchConfig {
    LaunchConfig::for_1d(32, 32)
}

/// Checks that `coords` maps (lane, register) one-to-one onto a `rows × cols` matrix and agrees
/// with `table`, the PTX ISA's description written out independently.
fn check_layout(
    what: &str,
    (rows, cols): (u32, u32),
    regs: u32,
    coords: impl Fn(u32, u32) -> (u32, u32),
    table: impl Fn(u32, u32, u32, u32) -> (u32, u32),
) {
    let mut seen = vec![false; (rows * cols) as usize];
    for lane in 0..32 {
        let (group, tid) = (lane >> 2, lane % 4);
        for r in 0..regs {
            let (i, j) = coords(lane, r);
            assert_eq!((i, j), table(group, tid, r, lane), "{what}: lane {lane}, register {r}");
            assert!(i < rows && j < cols, "{what}: ({i}, {j}) outside {rows} × {cols}");
            assert!(!std::mem::replace(&mut seen[(i * cols + j) as usize], true), "{what}: ({i}, {j}) twice");
        }
    }
    assert!(seen.iter().all(|&s| s), "{what}: not every element is held by a lane");
}

#[test]
fn fragment_layouts_match_the_ptx_isa_tables() {
    check_layout("tf32 A", (16, 8), 4, mma::tf32_a_coords, |g, t, r, _| {
        let row = if r == 0 || r == 2 { g } else { g + 8 };
        let col = if r < 2 { t } else { t + 4 };
        (row, col)
    });
    check_layout("tf32 B", (8, 8), 2, mma::tf32_b_coords, |g, t, r, _| (if r == 0 { t } else { t + 4 }, g));
    check_layout("m16n8 C", (16, 8), 4, mma::m16n8_c_coords, |g, t, r, _| {
        (if r < 2 { g } else { g + 8 }, t * 2 + (r & 1))
    });
    check_layout("m16n8k16 A", (16, 16), 8, mma::m16n8k16_a_coords, |g, t, h, _| {
        let row = if h < 2 || (4..6).contains(&h) { g } else { g + 8 };
        let col = if h < 4 { t * 2 + (h & 1) } else { t * 2 + 8 + (h & 1) };
        (row, col)
    });
    check_layout("m16n8k16 B", (16, 8), 4, mma::m16n8k16_b_coords, |g, t, h, _| {
        (if h < 2 { t * 2 + (h & 1) } else { t * 2 + (h & 1) + 8 }, g)
    });
    check_layout("f64 A", (8, 4), 1, |lane, _| mma::f64_a_coords(lane), |g, t, _, _| (g, t));
    check_layout("f64 B", (4, 8), 1, |lane, _| mma::f64_b_coords(lane), |g, t, _, _| (t, g));
    check_layout("f64 C", (8, 8), 2, mma::f64_c_coords, |g, t, r, _| (g, t * 2 + r));
}

/// `a·b + c` in f64 (`a` m × k, `b` k × n, row-major), and per element `Σ|a||b| + |c|` for error bounds.
fn reference(a: &[f64], b: &[f64], c: &[f64], (m, n, k): (usize, usize, usize)) -> (Vec<f64>, Vec<f64>) {
    let mut d = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut t) = (c[i * n + j], c[i * n + j].abs());
            for p in 0..k {
                s += a[i * k + p] * b[p * n + j];
                t += (a[i * k + p] * b[p * n + j]).abs();
            }
            d[i * n + j] = s;
            mag[i * n + j] = t;
        }
    }
    (d, mag)
}

/// Checks `got` against the reference: exactly when `exact`, else within `rel · Σ|a||b| + |c|`.
fn check(what: &str, device: &Device, got: &[f64], want: (Vec<f64>, Vec<f64>), exact: bool, rel: f64) {
    for (e, (&g, (&w, &mag))) in got.iter().zip(want.0.iter().zip(&want.1)).enumerate() {
        let ok = if exact { g == w } else { (g - w).abs() <= rel * mag };
        assert!(ok, "{what} on {}: element {e} is {g}, expected {w}", device.describe());
    }
}

/// Small integers (exact in every format and every order of summation), or uniform values.
fn values(rng: &mut SmallRng, n: usize, integers: bool) -> Vec<f64> {
    (0..n)
        .map(|_| if integers { rng.random_range(-8i32..=8) as f64 } else { rng.random_range(-1.0..1.0) })
        .collect()
}

#[test]
fn tf32_mma_matches_reference() {
    for device in common::devices("tf32_mma_matches_reference") {
        for (seed, integers) in [(1, true), (2, false), (3, false)] {
            let mut rng = common::rng(seed);
            let tf32 = |v: Vec<f64>| v.into_iter().map(|x| mma::to_tf32(x as f32)).collect::<Vec<f32>>();
            let a = tf32(values(&mut rng, 16 * 8, integers));
            let b = tf32(values(&mut rng, 8 * 8, integers));
            let c: Vec<f32> = values(&mut rng, 16 * 8, integers).into_iter().map(|x| x as f32).collect();
            let (da, db, dc) =
                (device.upload(&a).unwrap(), device.upload(&b).unwrap(), device.upload(&c).unwrap());
            let mut dd = device.alloc::<f32>(16 * 8).unwrap();
            unsafe { device.launch(&MMA_TF32_PROBE, warp(), (&da, &db, &dc, &mut dd)).unwrap() };
            let got: Vec<f64> = device.download(&dd).unwrap().into_iter().map(f64::from).collect();
            let wide = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
            let want = reference(&wide(&a), &wide(&b), &wide(&c), (16, 8, 8));
            check("tf32 m16n8k8", &device, &got, want, integers, 2e-6);
        }
    }
}

/// The warpgroup MMA in both forms (`A` from shared memory, `A` from registers) on operands that
/// are not tf32 values: the reference truncates them to tf32 as the tensor cores do (exact on small
/// integers; within f32 accumulation on uniform values).
#[test]
fn tf32_wgmma_matches_reference() {
    let truncate = |x: f64| f32::from_bits((x as f32).to_bits() & !0x1fff) as f64;
    for device in common::devices("tf32_wgmma_matches_reference") {
        if !device.has_kernel(WGMMA_TF32_PROBE.name()) {
            eprintln!("SKIPPED tf32_wgmma_matches_reference on {}: no sm_90a cubin", device.describe());
            continue;
        }
        for (seed, integers) in [(4, true), (5, false), (6, false)] {
            let mut rng = common::rng(seed);
            let a: Vec<f32> = values(&mut rng, 64 * 8, integers).into_iter().map(|x| x as f32).collect();
            let b: Vec<f32> = values(&mut rng, 128 * 8, integers).into_iter().map(|x| x as f32).collect();
            let c: Vec<f32> = values(&mut rng, 64 * 128, integers).into_iter().map(|x| x as f32).collect();
            // The reference takes B as k × n: transpose the K-major 128 × 8.
            let bt: Vec<f64> = (0..8 * 128).map(|e| truncate(b[(e % 128) * 8 + e / 128] as f64)).collect();
            let at: Vec<f64> = a.iter().map(|&x| truncate(x as f64)).collect();
            let cw: Vec<f64> = c.iter().map(|&x| x as f64).collect();
            let (da, db, dc) =
                (device.upload(&a).unwrap(), device.upload(&b).unwrap(), device.upload(&c).unwrap());
            for from_registers in [0u32, 1] {
                let mut dd = device.alloc::<f32>(64 * 128).unwrap();
                let cfg = LaunchConfig::for_1d(128, 128).with_shared_bytes(WGMMA_PROBE_SHARED_BYTES);
                let args = (&da, &db, &dc, &mut dd, from_registers);
                unsafe { device.launch(&WGMMA_TF32_PROBE, cfg, args).unwrap() };
                let got: Vec<f64> = device.download(&dd).unwrap().into_iter().map(f64::from).collect();
                let what =
                    if from_registers == 1 { "wgmma m64n128k8, A in registers" } else { "wgmma m64n128k8" };
                check(what, &device, &got, reference(&at, &bt, &cw, (64, 128, 8)), integers, 2e-6);
            }
        }
    }
}

/// IEEE binary16 bits of `x`, which must be exactly representable (small integers, multiples of
/// 2⁻⁸ in `[-1, 1]`).
fn f16_bits(x: f64) -> u16 {
    if x == 0.0 {
        return 0;
    }
    let sign = if x < 0.0 { 0x8000 } else { 0 };
    let e = x.abs().log2().floor() as i32;
    let man = x.abs() / 2f64.powi(e) * 1024.0 - 1024.0;
    assert!(man.fract() == 0.0 && (-14..=15).contains(&e), "{x} is not exact in f16");
    sign | (((e + 15) as u16) << 10) | man as u16
}

/// bfloat16 bits of `x`, which must be exactly representable.
fn bf16_bits(x: f64) -> u16 {
    let bits = (x as f32).to_bits();
    assert!(bits & 0xffff == 0, "{x} is not exact in bf16");
    (bits >> 16) as u16
}

#[test]
fn f16_and_bf16_mma_match_reference() {
    type Probe = gpu_std::KernelFn<(Slice<u16>, Slice<u16>, Slice<f32>, SliceMut<f32>)>;
    /// Name, probe kernel, encoder of exact values.
    type Kind = (&'static str, &'static Probe, fn(f64) -> u16);
    let kinds: [Kind; 2] = [("f16", &MMA_F16_PROBE, f16_bits), ("bf16", &MMA_BF16_PROBE, bf16_bits)];
    for device in common::devices("f16_and_bf16_mma_match_reference") {
        for (name, probe, bits) in kinds {
            for (seed, integers) in [(4, true), (5, false)] {
                let mut rng = common::rng(seed);
                // Non-integers: multiples of 2⁻⁸, exact in both formats.
                let exact =
                    |v: Vec<f64>| v.into_iter().map(|x| (x * 256.0).round() / 256.0).collect::<Vec<_>>();
                let a = exact(values(&mut rng, 16 * 16, integers));
                let b = exact(values(&mut rng, 16 * 8, integers));
                let c: Vec<f32> = values(&mut rng, 16 * 8, integers).into_iter().map(|x| x as f32).collect();
                let up =
                    |v: &[f64]| device.upload(&v.iter().map(|&x| bits(x)).collect::<Vec<u16>>()).unwrap();
                let (da, db, dc) = (up(&a), up(&b), device.upload(&c).unwrap());
                let mut dd = device.alloc::<f32>(16 * 8).unwrap();
                unsafe { device.launch(probe, warp(), (&da, &db, &dc, &mut dd)).unwrap() };
                let got: Vec<f64> = device.download(&dd).unwrap().into_iter().map(f64::from).collect();
                let c64: Vec<f64> = c.iter().map(|&x| x as f64).collect();
                let want = reference(&a, &b, &c64, (16, 8, 16));
                check(&format!("{name} m16n8k16"), &device, &got, want, integers, 2e-6);
            }
        }
    }
}

#[test]
fn f64_mma_matches_reference() {
    for device in common::devices("f64_mma_matches_reference") {
        for (seed, integers) in [(6, true), (7, false)] {
            let mut rng = common::rng(seed);
            let (a, b, c) = (
                values(&mut rng, 32, integers),
                values(&mut rng, 32, integers),
                values(&mut rng, 64, integers),
            );
            let (da, db, dc) =
                (device.upload(&a).unwrap(), device.upload(&b).unwrap(), device.upload(&c).unwrap());
            let mut dd = device.alloc::<f64>(64).unwrap();
            unsafe { device.launch(&MMA_F64_PROBE, warp(), (&da, &db, &dc, &mut dd)).unwrap() };
            let got = device.download(&dd).unwrap();
            check("f64 m8n8k4", &device, &got, reference(&a, &b, &c, (8, 8, 4)), integers, 1e-15);
        }
    }
}

/// tf32 rounding computed in f64: the nearest multiple of the tf32 spacing at `x`'s binade, ties
/// away from zero.
fn tf32_reference(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    if x == 0.0 {
        return x;
    }
    let v = x.abs() as f64;
    let binade = (v.log2().floor() as i32).max(-126);
    let spacing = 2f64.powi(binade - 10);
    let q = v / spacing;
    let rounded = if q - q.floor() >= 0.5 { q.floor() + 1.0 } else { q.floor() };
    (rounded * spacing).copysign(x as f64) as f32
}

#[test]
fn tf32_rounding_is_exact() {
    let mut rng = common::rng(8);
    let mut x: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        1e-40,
        -3e-42,
        f32::from_bits(1),
        1.0 + 2f32.powi(-11),          // a tie: away from zero
        -(1.0 + 3.0 * 2f32.powi(-11)), // a tie above an odd mantissa
        1.0 + 2f32.powi(-11) - 2f32.powi(-23),
        f32::from_bits(0x3f80_1000),
        f32::from_bits(0x3f80_0fff),
    ];
    x.extend((0..2000).map(|_| f32::from_bits(rng.random::<u32>())).filter(|v| !v.is_nan()));
    x.extend((0..2000).map(|_| rng.random_range(-4.0f32..4.0)));
    for device in common::devices("tf32_rounding_is_exact") {
        let dx = device.upload(&x).unwrap();
        let mut dy = device.alloc::<f32>(x.len()).unwrap();
        let cfg = LaunchConfig::for_grid_stride(x.len(), 128, 8);
        unsafe { device.launch(&TF32_ROUND_PROBE, cfg, (&dx, &mut dy)).unwrap() };
        for (&v, got) in x.iter().zip(device.download(&dy).unwrap()) {
            let want = tf32_reference(v);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "tf32({v:e} = {:#x}) on {}",
                v.to_bits(),
                device.describe()
            );
            assert_eq!(mma::to_tf32(v).to_bits(), want.to_bits(), "host to_tf32({v:e})");
        }
        assert!(mma::to_tf32(f32::NAN).is_nan());
    }
}

#[test]
fn cp_async_copies_and_zero_fills() {
    let src: Vec<f32> = (0..64).map(|i| i as f32 + 0.5).collect();
    for device in common::devices("cp_async_copies_and_zero_fills") {
        let dsrc = device.upload(&src).unwrap();
        for valid in [0u32, 1, 5, 31, 33, 47, 50, 63, 64] {
            let mut dst = device.alloc::<f32>(64).unwrap();
            let cfg = LaunchConfig::for_1d(16, 16).with_shared_bytes(256);
            unsafe { device.launch(&CP_ASYNC_PROBE, cfg, (&dsrc, &mut dst, valid)).unwrap() };
            let got = device.download(&dst).unwrap();
            for (i, &g) in got.iter().enumerate() {
                let want = if (i as u32) < valid { src[i] } else { 0.0 };
                assert_eq!(g, want, "valid {valid}, element {i} on {}", device.describe());
            }
        }
    }
}
