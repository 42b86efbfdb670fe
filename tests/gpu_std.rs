//! The device library's primitives (`gpu-std`): atomics under contention, warp and block
//! collectives, 3-D indices, printf and assert, half precision — through the probe kernels of
//! `kernels::gpu_std_probe`, on the simulator and on the GPU, against exact CPU answers.

mod common;

use kernel_suite::{Backend, Device, Dim3, LaunchConfig};
use kernels::gpu_std_probe::*;
use rand::Rng;
use std::collections::HashMap;

#[test]
fn atomics_from_every_block_lose_no_update() {
    let n = 100_003usize;
    let keys_used = 7u32;
    let slots = 9usize; // two keys never used: their slots must keep their initial values
    let mut rng = common::rng(29);
    let keys: Vec<u32> = (0..n).map(|_| rng.random_range(0..keys_used)).collect();
    let values: Vec<i32> = (0..n).map(|_| rng.random_range(-1000..=1000)).collect();
    let s = ATOMIC_SLOTS * slots;
    let u32_init: Vec<u32> =
        (0..s).map(|j| if j % 4 == 2 { 5000 } else { rng.random_range(0..1000) }).collect();
    let i32_init: Vec<i32> =
        (0..s).map(|j| if j % 4 == 3 { -1 } else { rng.random_range(-500..500) }).collect();
    let u64_init: Vec<u64> = (0..s).map(|_| rng.random::<u64>() >> 8).collect();
    let i64_init: Vec<i64> = (0..s).map(|_| rng.random_range(-1 << 40..1 << 40)).collect();
    let f32_init: Vec<f32> = (0..s).map(|_| rng.random_range(-100..100) as f32).collect();
    let f64_init: Vec<f64> = (0..s).map(|_| rng.random_range(-100..100) as f64).collect();
    let last_init: Vec<u32> = (0..slots as u32).map(|k| 0xaaaa_0000 + k).collect();

    // The reference: the same operations, one element after another.
    let (mut u32e, mut i32e, mut u64e, mut i64e) =
        (u32_init.clone(), i32_init.clone(), u64_init.clone(), i64_init.clone());
    let (mut f32e, mut f64e) = (f32_init.clone(), f64_init.clone());
    for (i, (&k, &v)) in keys.iter().zip(&values).enumerate() {
        let s = ATOMIC_SLOTS * k as usize;
        u32e[s] = u32e[s].wrapping_add(1);
        u32e[s + 1] = u32e[s + 1].max((v + 1000) as u32);
        u32e[s + 2] = u32e[s + 2].min((v + 1000) as u32);
        u32e[s + 3] ^= i as u32;
        i32e[s] = i32e[s].wrapping_add(v);
        i32e[s + 1] = i32e[s + 1].min(v);
        i32e[s + 2] = i32e[s + 2].max(v);
        i32e[s + 3] &= !(1 << (i % 31));
        u64e[s] = u64e[s].wrapping_add(((v + 1000) as u64) << 20);
        u64e[s + 1] |= 1 << (i % 64);
        u64e[s + 2] = u64e[s + 2].max((i as u64) << 33);
        u64e[s + 3] ^= (i as u64) << 32;
        i64e[s] = i64e[s].wrapping_add(v as i64 * 3_000_000_000);
        i64e[s + 1] = i64e[s + 1].min(v as i64 * 1_000_000_000);
        i64e[s + 2] = i64e[s + 2].max(v as i64 * 1_000_000_000);
        i64e[s + 3] |= i as i64;
        f32e[s] += v as f32;
        f32e[s + 1] += v as f32 / 2.0;
        f32e[s + 2] = f32e[s + 2].min(v as f32 / 4.0);
        f32e[s + 3] = f32e[s + 3].max(v as f32 / 4.0);
        f64e[s] += v as f64 / 4.0;
        f64e[s + 1] = f64e[s + 1].min(v as f64);
        f64e[s + 2] = f64e[s + 2].max(v as f64);
        f64e[s + 3] += 1.0;
    }

    for device in common::devices("atomics_from_every_block_lose_no_update") {
        let dk = device.upload(&keys).unwrap();
        let dv = device.upload(&values).unwrap();
        let mut du32 = device.upload(&u32_init).unwrap();
        let mut di32 = device.upload(&i32_init).unwrap();
        let mut du64 = device.upload(&u64_init).unwrap();
        let mut di64 = device.upload(&i64_init).unwrap();
        let mut df32 = device.upload(&f32_init).unwrap();
        let mut df64 = device.upload(&f64_init).unwrap();
        let mut claims = device.upload(&vec![u32::MAX; slots]).unwrap();
        let mut won = device.upload(&vec![0u32; n]).unwrap();
        let mut last = device.upload(&last_init).unwrap();
        let mut previous = device.alloc::<u32>(n).unwrap();
        let args = (
            &dk,
            &dv,
            &mut du32,
            &mut di32,
            &mut du64,
            &mut di64,
            &mut df32,
            &mut df64,
            &mut claims,
            &mut won,
            &mut last,
            &mut previous,
        );
        // SAFETY: one thread per element; every shared slot is only touched atomically.
        unsafe { device.launch(&ATOMIC_CONTENTION, LaunchConfig::for_1d(n, 256), args).unwrap() };
        let what = device.describe();
        assert_eq!(device.download(&du32).unwrap(), u32e, "u32 atomics on {what}");
        assert_eq!(device.download(&di32).unwrap(), i32e, "i32 atomics on {what}");
        assert_eq!(device.download(&du64).unwrap(), u64e, "u64 atomics on {what}");
        assert_eq!(device.download(&di64).unwrap(), i64e, "i64 atomics on {what}");
        assert_eq!(device.download(&df32).unwrap(), f32e, "f32 atomics on {what}");
        assert_eq!(device.download(&df64).unwrap(), f64e, "f64 atomics on {what}");

        let (claims, won) = (device.download(&claims).unwrap(), device.download(&won).unwrap());
        let (last, previous) = (device.download(&last).unwrap(), device.download(&previous).unwrap());
        for k in 0..slots {
            let members: Vec<usize> = (0..n).filter(|&i| keys[i] as usize == k).collect();
            let winners: Vec<usize> = members.iter().copied().filter(|&i| won[i] == 1).collect();
            if members.is_empty() {
                assert_eq!(claims[k], u32::MAX, "key {k} has no element but was claimed on {what}");
                assert_eq!(last[k], last_init[k], "key {k} has no element but was swapped on {what}");
                continue;
            }
            assert_eq!(winners.len(), 1, "key {k}: {} compare-and-swap winners on {what}", winners.len());
            assert_eq!(claims[k] as usize, winners[0], "key {k}: the claim is not its winner's on {what}");
            // Every swap returned what the one before it stored: the old values and the final one are
            // the initial value and every member, each once.
            let mut chain: Vec<u32> = members.iter().map(|&i| previous[i]).chain([last[k]]).collect();
            let mut expected: Vec<u32> = members.iter().map(|&i| i as u32).chain([last_init[k]]).collect();
            chain.sort_unstable();
            expected.sort_unstable();
            assert_eq!(chain, expected, "key {k}: the swaps do not form one chain on {what}");
        }
        assert!(won.iter().all(|&w| w <= 1), "won[] holds only 0 and 1 on {what}");
    }
}

#[test]
fn shared_memory_histogram_counts_every_element() {
    let n = 50_021usize;
    let bins = 257u32;
    let mut rng = common::rng(30);
    let x: Vec<u32> = (0..n).map(|_| rng.random()).collect();
    let init: Vec<u32> = (0..bins).map(|_| rng.random_range(0..100)).collect();
    let mut expected = init.clone();
    for &v in &x {
        expected[(v % bins) as usize] += 1;
    }
    for device in common::devices("shared_memory_histogram_counts_every_element") {
        let dx = device.upload(&x).unwrap();
        let mut hist = device.upload(&init).unwrap();
        let cfg = LaunchConfig::for_grid_stride(n, 128, 37)
            .with_shared_bytes(shared_histogram_layout(bins).bytes_u32());
        // SAFETY: a grid-stride loop over `x`; `hist` has `bins` counters.
        unsafe { device.launch(&SHARED_HISTOGRAM_PROBE, cfg, (&dx, bins, &mut hist)).unwrap() };
        assert_eq!(device.download(&hist).unwrap(), expected, "on {}", device.describe());
    }
}

#[test]
fn release_store_and_acquire_load_pass_a_message_between_blocks() {
    let threads = 64usize;
    let blocks = 4usize;
    for device in common::devices("release_store_and_acquire_load_pass_a_message_between_blocks") {
        let mut data = device.alloc::<u32>(threads).unwrap();
        let mut flag = device.upload(&[0u32]).unwrap();
        let mut seen = device.alloc::<u32>((blocks - 1) * threads).unwrap();
        let cfg = LaunchConfig::for_1d(blocks * threads, threads as u32);
        // SAFETY: four blocks of 64 threads fit on any GPU at once; the waiting ones spin.
        unsafe { device.launch(&MESSAGE_PASSING, cfg, (&mut data, &mut flag, &mut seen)).unwrap() };
        let seen = device.download(&seen).unwrap();
        for (j, &got) in seen.iter().enumerate() {
            assert_eq!(got, 7 * (j % threads) as u32 + 1, "element {j} on {}", device.describe());
        }
    }
}

#[test]
fn a_grid_barrier_lets_no_block_pass_early_and_shows_every_write() {
    let (threads, rounds) = (64u32, 40u32);
    for device in common::devices("a_grid_barrier_lets_no_block_pass_early_and_shows_every_write") {
        let blocks: u32 =
            if device.backend() == Backend::Gpu { device.multiprocessors().unwrap() } else { 5 };
        let mut counter = device.upload(&[0u32]).unwrap();
        let mut values = device.upload(&vec![u32::MAX; (rounds * blocks * threads) as usize]).unwrap();
        let mut out = device.upload(&vec![u32::MAX; (rounds * blocks) as usize]).unwrap();
        let cfg = LaunchConfig::for_1d((blocks * threads) as usize, threads);
        // SAFETY: a cooperative launch; the counter is zero; every slot lies inside its buffer.
        unsafe {
            device
                .launch_cooperative(&GRID_BARRIER_PROBE, cfg, (rounds, &mut counter, &mut values, &mut out))
                .unwrap()
        };
        let out = device.download(&out).unwrap();
        for round in 0..rounds {
            let expected = (0..blocks)
                .flat_map(|g| (0..threads).map(move |t| grid_barrier_value(round, g, t)))
                .fold(0u32, u32::wrapping_add);
            for g in 0..blocks {
                let got = out[(round * blocks + g) as usize];
                assert_eq!(got, expected, "round {round}, block {g} of {blocks} on {}", device.describe());
            }
        }
        assert_eq!(device.download(&counter).unwrap(), [rounds * blocks], "the counter's arrivals");
    }
}

/// `x` for [`warp_probe`]: random below 2^30, all lanes of every third warp (from the second)
/// with the top bit set (negative as i32, equal in `x >> 30`), lane 7 of every third warp (from the
/// third) with bit 30 set (unequal in `x >> 30`).
fn warp_input(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = common::rng(seed);
    (0..n)
        .map(|i| {
            let v = rng.random::<u32>() & 0x3fff_ffff;
            match (i / 32 % 3, i % 32) {
                (1, _) => v | 0x8000_0000,
                (2, 7) => v | 0x4000_0000,
                _ => v,
            }
        })
        .collect()
}

/// What [`warp_probe`] computes, from one warp's 32 values.
fn warp_reference(x: &[u32]) -> Vec<[u32; WARP_RESULTS]> {
    let ballot = |f: &dyn Fn(u32) -> bool| (0..32).filter(|&l| f(x[l])).fold(0u32, |m, l| m | 1 << l);
    let odd = ballot(&|v| v % 2 == 1);
    let sum64: u64 = x.iter().map(|&v| v as u64).sum();
    let all_top_equal = x.iter().all(|&v| v >> 30 == x[0] >> 30);
    (0..32)
        .map(|l| {
            let v = x[l];
            let up = |d: usize| if l >= d { x[l - d] } else { v };
            let down = |d: usize| if l + d < 32 { x[l + d] } else { v };
            let before: u64 = x[..l].iter().map(|&v| v as u64).sum();
            let mut r = [0u32; WARP_RESULTS];
            r[0] = up(3);
            r[1] = down(5);
            r[2] = x[l ^ 6];
            r[3] = x[9];
            r[4] = (-(up(1) as i64) * 1_000_000_007) as u32
                ^ ((up(1) % 2) << 31)
                ^ ((down(1) as u8 as u32) << 8);
            r[5] = odd;
            r[6] = (odd != 0) as u32 | ((odd == u32::MAX) as u32) << 1;
            r[7] = ballot(&|w| w % 4 == v % 4);
            r[8] = if all_top_equal { u32::MAX } else { 0xdead };
            r[9] = x.iter().fold(0u32, |a, &b| a.wrapping_add(b));
            r[10] = x.iter().map(|&w| w as i32).min().unwrap() as u32;
            r[11] = *x.iter().max().unwrap();
            r[12] = x.iter().fold(u32::MAX, |a, &b| a & b);
            r[13] = x.iter().fold(0, |a, &b| a | b);
            r[14] = x.iter().fold(0, |a, &b| a ^ b);
            r[15] = sum64 as u32;
            r[16] = x[..=l].iter().fold(0u32, |a, &b| a.wrapping_add(b));
            r[17] = (before % 1_000_003) as u32 ^ ((sum64 % 1_000_003) as u32) << 12;
            r[18] = if v % 2 == 1 { odd } else { 0 };
            r[19] = if l % 2 == 0 { x[l ^ 2] } else { u32::MAX };
            r
        })
        .collect()
}

#[test]
fn warp_collectives_match_their_definitions() {
    let (blocks, threads) = (7usize, 96usize);
    let n = blocks * threads;
    let x = warp_input(n, 31);
    let expected: Vec<[u32; WARP_RESULTS]> = x.chunks(32).flat_map(warp_reference).collect();
    let names = [
        "shfl_up",
        "shfl_down",
        "shfl_xor",
        "shfl_idx",
        "64-bit, bool and u8 shuffles",
        "ballot",
        "any | all",
        "match_any",
        "match_all",
        "redux add",
        "redux min",
        "redux max",
        "redux and",
        "redux or",
        "redux xor",
        "warp::reduce (f64)",
        "warp::inclusive_scan",
        "warp::exclusive_scan",
        "activemask",
        "partial-mask shuffle",
    ];
    for device in common::devices("warp_collectives_match_their_definitions") {
        let dx = device.upload(&x).unwrap();
        let mut out = device.alloc::<u32>(n * WARP_RESULTS).unwrap();
        // SAFETY: one thread per element of `x`.
        unsafe {
            device.launch(&WARP_PROBE, LaunchConfig::for_1d(n, threads as u32), (&dx, &mut out)).unwrap()
        };
        let got = device.download(&out).unwrap();
        let gpu = device.backend() == Backend::Gpu;
        for i in 0..n {
            for (j, name) in names.iter().enumerate() {
                let (g, e) = (got[WARP_RESULTS * i + j], expected[i][j]);
                if j == 18 && gpu && e != 0 {
                    // On the GPU a branch may be predicated instead of taken: `activemask` then also
                    // names lanes that did not take it. It always names every lane that did.
                    assert_eq!(g & e, e, "{name}, thread {i}: {g:#010x} lacks lanes of {e:#010x}");
                    continue;
                }
                assert_eq!(g, e, "{name}, thread {i} (lane {}) on {}", i % 32, device.describe());
            }
        }
    }
}

#[test]
fn block_collectives_match_their_definitions() {
    let (blocks, threads) = (9usize, 160usize);
    let n = blocks * threads;
    let mut rng = common::rng(32);
    let mut x: Vec<u32> = (0..n).map(|_| rng.random_range(0..1 << 24)).collect();
    // Block 2 all odd, block 3 all even: `and` and `or` see both answers.
    x[2 * threads..3 * threads].iter_mut().for_each(|v| *v |= 1);
    x[3 * threads..4 * threads].iter_mut().for_each(|v| *v &= !1);
    for device in common::devices("block_collectives_match_their_definitions") {
        let dx = device.upload(&x).unwrap();
        let mut out = device.alloc::<u32>(n * BLOCK_RESULTS).unwrap();
        let cfg = LaunchConfig::for_1d(n, threads as u32)
            .with_shared_bytes(block_probe_layout(threads as u32).bytes_u32());
        // SAFETY: one thread per element of `x`, whole warps, the layout's shared memory.
        unsafe { device.launch(&BLOCK_PROBE, cfg, (&dx, &mut out)).unwrap() };
        let got = device.download(&out).unwrap();
        for (b, block) in x.chunks(threads).enumerate() {
            let odd = block.iter().filter(|&&v| v % 2 == 1).count() as u32;
            let sum: u64 = block.iter().map(|&v| v as u64).sum();
            let max = *block.iter().max().unwrap();
            let mut before = 0u64;
            for (t, &v) in block.iter().enumerate() {
                let i = b * threads + t;
                let r = &got[BLOCK_RESULTS * i..BLOCK_RESULTS * (i + 1)];
                let inclusive = before + v as u64;
                let expected = [
                    odd,
                    (odd == threads as u32) as u32 | ((odd > 0) as u32) << 1,
                    sum as u32,
                    max,
                    inclusive as u32 ^ (before as u32) << 16,
                    1,
                ];
                assert_eq!(r, expected, "block {b}, thread {t} on {}", device.describe());
                before = inclusive;
            }
        }
    }
}

#[test]
fn three_dimensional_launches_index_every_element_once() {
    let (w, h, d) = (37u32, 11u32, 5u32);
    for device in common::devices("three_dimensional_launches_index_every_element_once") {
        let mut out = device.alloc::<u32>((w * h * d) as usize).unwrap();
        let cfg = LaunchConfig::for_3d(w as usize, h as usize, d as usize, Dim3::xyz(8, 4, 2));
        assert_eq!(cfg.grid, Dim3::xyz(5, 3, 3));
        // SAFETY: the kernel checks its indices against the extents.
        unsafe { device.launch(&INDEX_3D_PROBE, cfg, (w, h, d, &mut out)).unwrap() };
        let got = device.download(&out).unwrap();
        for z in 0..d {
            for y in 0..h {
                for x in 0..w {
                    let at = ((z * h + y) * w + x) as usize;
                    assert_eq!(
                        got[at],
                        x + 1000 * y + 1_000_000 * z,
                        "({x}, {y}, {z}) on {}",
                        device.describe()
                    );
                }
            }
        }
    }
}

/// The values [`printf_probe`] prints (each exact in binary, so `%g` and Rust print them alike)
/// and the line it prints for element `i`.
fn printf_input(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.25 - 3.0).collect()
}

fn printf_line(i: usize, x: f32) -> String {
    format!("probe {i} {i} {} {:5.2} {}", i as u64 * 1_000_000_007, x, x as f64)
}

#[test]
fn printf_in_the_simulator_prints_one_line_per_thread_with_block_and_thread() {
    let device = Device::simulator();
    let x = printf_input(70);
    let dx = device.upload(&x).unwrap();
    let ((), lines) = gpu_std::sim::capture_output(|| {
        // SAFETY: the kernel checks its index.
        unsafe { device.launch(&PRINTF_PROBE, LaunchConfig::for_1d(x.len(), 32), (&dx,)).unwrap() }
    });
    let mut expected: Vec<String> = (0..x.len())
        .map(|i| format!("[block ({}, 0, 0) thread ({}, 0, 0)] {}", i / 32, i % 32, printf_line(i, x[i])))
        .collect();
    let mut lines = lines;
    lines.sort();
    expected.sort();
    assert_eq!(lines, expected);
}

/// Runs the ignored test `child` of this binary with `GPU_STD_CHILD=1` and returns its output
/// (stdout, then stderr): GPU printf writes to the process's stdout, and a failed assert leaves the
/// process's CUDA context unusable.
fn run_child(child: &str) -> String {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", child, "--nocapture", "--test-threads=1"])
        .env("GPU_STD_CHILD", "1")
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{child} failed:\n{text}");
    text
}

#[test]
#[ignore = "run by printf_on_the_gpu_prints_one_line_per_thread in a process of its own"]
fn printf_on_the_gpu_child() {
    assert_eq!(std::env::var("GPU_STD_CHILD").as_deref(), Ok("1"), "run as a child only");
    let device = Device::gpu(0, &kernel_suite::KERNELS).unwrap();
    let x = printf_input(70);
    let dx = device.upload(&x).unwrap();
    // SAFETY: the kernel checks its index.
    unsafe { device.launch(&PRINTF_PROBE, LaunchConfig::for_1d(x.len(), 32), (&dx,)).unwrap() };
    device.synchronize().unwrap();
}

#[test]
fn printf_on_the_gpu_prints_one_line_per_thread() {
    let Some(_gpu) = common::gpu_or_skip("printf_on_the_gpu_prints_one_line_per_thread") else { return };
    let stdout = run_child("printf_on_the_gpu_child");
    let x = printf_input(70);
    // The first line may follow the test harness's "test printf_on_the_gpu_child ... ".
    let mut lines: Vec<&str> = stdout.lines().filter_map(|l| l.find("probe ").map(|at| &l[at..])).collect();
    let mut expected: Vec<String> = (0..x.len()).map(|i| printf_line(i, x[i])).collect();
    lines.sort();
    expected.sort();
    assert_eq!(lines, expected, "stdout:\n{stdout}");
}

/// The line of `gpu_assert!` in the probe kernel, for the messages that name it.
fn assert_line() -> usize {
    let source = include_str!("../kernels/src/gpu_std_probe.rs");
    1 + source.lines().position(|l| l.contains("gpu_assert!(x[i] < limit")).unwrap()
}

#[test]
fn failed_assert_in_the_simulator_is_reported_once_at_its_line() {
    let device = Device::simulator();
    let x: Vec<u32> = (0..64).collect();
    let dx = device.upload(&x).unwrap();
    let mut out = device.alloc::<u32>(64).unwrap();
    // SAFETY: the buffers hold the 64 elements the kernel reads and writes.
    let failed = unsafe { device.launch(&ASSERT_PROBE, LaunchConfig::for_1d(64, 64), (&dx, 50, &mut out)) };
    let message = failed.expect_err("the assertion must fail").to_string();
    assert_eq!(
        message,
        format!(
            "kernel `assert_probe` panicked in block (0, 0, 0), thread (50, 0, 0) at kernels/src/gpu_std_probe.rs:{}:9: \
             assertion `x[i] < limit` failed: x[50] = 50 is not below 50\n(13 more threads failed, in 1 block in all)",
            assert_line()
        )
    );
}

#[test]
#[ignore = "run by failed_assert_on_the_gpu_names_kernel_thread_and_message in a process of its own"]
fn failed_assert_on_the_gpu_child() {
    assert_eq!(std::env::var("GPU_STD_CHILD").as_deref(), Ok("1"), "run as a child only");
    let device = Device::gpu(0, &kernel_suite::KERNELS).unwrap();
    let x: Vec<u32> = (0..64).collect();
    let dx = device.upload(&x).unwrap();
    let mut out = device.alloc::<u32>(64).unwrap();
    // SAFETY: the kernel checks its index.
    unsafe { device.launch(&ASSERT_PROBE, LaunchConfig::for_1d(64, 64), (&dx, 60, &mut out)).unwrap() };
    let err = device.synchronize().expect_err("the assertion must fail");
    println!("host error: {err}");
}

#[test]
fn failed_assert_on_the_gpu_names_kernel_thread_and_message() {
    let Some(_gpu) = common::gpu_or_skip("failed_assert_on_the_gpu_names_kernel_thread_and_message") else {
        return;
    };
    let stdout = run_child("failed_assert_on_the_gpu_child");
    for thread in 60..64 {
        let line =
            format!("block (0, 0, 0), thread ({thread}, 0, 0): x[{thread}] = {thread} is not below 60");
        assert!(stdout.contains(&line), "no `{line}` in:\n{stdout}");
    }
    assert!(stdout.contains("Assertion `x[i] < limit` failed."), "no CUDA assert line in:\n{stdout}");
    assert!(
        stdout.contains(&format!("gpu_std_probe.rs:{}", assert_line())),
        "CUDA's assert line does not name the source line:\n{stdout}"
    );
    let error = stdout.lines().find(|l| l.starts_with("host error: ")).expect("the host's error");
    assert!(error.contains("`assert_probe`"), "the host's error does not name the kernel: {error}");
}

/// An f16 or bf16 format: exponent and mantissa bits.
#[derive(Clone, Copy)]
struct HalfFormat {
    exponent_bits: u32,
    mantissa_bits: u32,
}

const F16: HalfFormat = HalfFormat { exponent_bits: 5, mantissa_bits: 10 };
const BF16: HalfFormat = HalfFormat { exponent_bits: 8, mantissa_bits: 7 };

impl HalfFormat {
    /// The value of `bits`, decoded from sign, exponent and mantissa (NaN for NaNs).
    fn decode(self, bits: u16) -> f64 {
        let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
        let exponent = (bits as u32 >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1);
        let mantissa = bits as u32 & ((1 << self.mantissa_bits) - 1);
        let bias = (1 << (self.exponent_bits - 1)) - 1;
        let scale = |e: i32| 2f64.powi(e - self.mantissa_bits as i32);
        if exponent == (1 << self.exponent_bits) - 1 {
            if mantissa == 0 { sign * f64::INFINITY } else { f64::NAN }
        } else if exponent == 0 {
            sign * mantissa as f64 * scale(1 - bias)
        } else {
            sign * ((1 << self.mantissa_bits) + mantissa) as f64 * scale(exponent as i32 - bias)
        }
    }

    /// The bits nearest to `x` (ties to the even bit pattern; past the largest finite value by half
    /// a step or more: ±∞), by search over every non-negative pattern.
    fn round(self, table: &[(f64, u16)], x: f32) -> u16 {
        let (x, sign) = ((x as f64).abs(), if x.is_sign_negative() { 0x8000u16 } else { 0 });
        let at = table.partition_point(|&(v, _)| v < x);
        let candidates = [at.checked_sub(1), Some(at).filter(|&a| a < table.len())];
        let best = candidates
            .into_iter()
            .flatten()
            .map(|j| table[j])
            .min_by(|a, b| (a.0 - x).abs().total_cmp(&(b.0 - x).abs()).then((a.1 & 1).cmp(&(b.1 & 1))))
            .unwrap();
        sign | best.1
    }

    /// `(value, bits)` of every finite non-negative pattern, ascending, then ∞ as the next step
    /// (so that rounding past the largest value goes to it).
    fn table(self) -> Vec<(f64, u16)> {
        let infinity = (((1u32 << self.exponent_bits) - 1) << self.mantissa_bits) as u16;
        let mut t: Vec<(f64, u16)> = (0..infinity).map(|b| (self.decode(b), b)).collect();
        let (max, before) = (t[t.len() - 1].0, t[t.len() - 2].0);
        t.push((max + (max - before), infinity));
        t
    }
}

#[test]
fn half_conversions_round_to_nearest_even() {
    let mut rng = common::rng(33);
    let mut x: Vec<f32> =
        (0..4001).map(|_| rng.random_range(-8.0f32..8.0) * 2f32.powi(rng.random_range(-30..20))).collect();
    // Ties, subnormals, overflow, zeros, infinities.
    x.extend([
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
    ]);
    x.extend([
        6e-8,
        3e-5,
        -6.1e-5,
        65504.0,
        65519.0,
        65520.0,
        1e6,
        3.4e38,
        -0.0,
        0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    let (f16_table, bf16_table) = (F16.table(), BF16.table());
    let f16_expected: Vec<u16> = x.iter().map(|&v| F16.round(&f16_table, v)).collect();
    let bf16_expected: Vec<u16> = x.iter().map(|&v| BF16.round(&bf16_table, v)).collect();
    for device in common::devices("half_conversions_round_to_nearest_even") {
        let n = x.len();
        let dx = device.upload(&x).unwrap();
        let (mut h, mut b) = (device.alloc::<u16>(n).unwrap(), device.alloc::<u16>(n).unwrap());
        let (mut hb, mut bb) = (device.alloc::<f32>(n).unwrap(), device.alloc::<f32>(n).unwrap());
        // SAFETY: the kernel checks its index.
        unsafe {
            device
                .launch(&HALF_PROBE, LaunchConfig::for_1d(n, 128), (&dx, &mut h, &mut b, &mut hb, &mut bb))
                .unwrap()
        };
        let what = device.describe();
        let (h, b) = (device.download(&h).unwrap(), device.download(&b).unwrap());
        let (hb, bb) = (device.download(&hb).unwrap(), device.download(&bb).unwrap());
        for i in 0..n {
            assert_eq!(h[i], f16_expected[i], "f16 of {:e} on {what}", x[i]);
            assert_eq!(b[i], bf16_expected[i], "bf16 of {:e} on {what}", x[i]);
            assert_eq!(hb[i] as f64, F16.decode(h[i]), "f16 {:#06x} back to f32 on {what}", h[i]);
            assert_eq!(bb[i] as f64, BF16.decode(b[i]), "bf16 {:#06x} back to f32 on {what}", b[i]);
        }
    }
}

#[test]
fn half_reference_is_exact_on_known_values() {
    let (f16_table, bf16_table) = (F16.table(), BF16.table());
    let known: HashMap<u32, (u16, u16)> = [
        (1.0f32.to_bits(), (0x3c00, 0x3f80)),
        ((-2.0f32).to_bits(), (0xc000, 0xc000)),
        (65504.0f32.to_bits(), (0x7bff, 0x4780)),
        (65520.0f32.to_bits(), (0x7c00, 0x4780)),
        ((1.0f32 + 2f32.powi(-11)).to_bits(), (0x3c00, 0x3f80)),
        ((1.0f32 + 3.0 * 2f32.powi(-11)).to_bits(), (0x3c02, 0x3f80)),
        (2f32.powi(-24).to_bits(), (0x0001, 0x3380)),
        (3.0e38f32.to_bits(), (0x7c00, 0x7f62)),
    ]
    .into_iter()
    .collect();
    for (&bits, &(h, b)) in &known {
        let x = f32::from_bits(bits);
        assert_eq!(F16.round(&f16_table, x), h, "f16 of {x:e}");
        assert_eq!(BF16.round(&bf16_table, x), b, "bf16 of {x:e}");
    }
}

#[test]
fn one_queue_waits_for_another_queues_mark_without_the_host() {
    for device in common::devices("one_queue_waits_for_another_queues_mark_without_the_host") {
        let (first, second) = (device.new_queue().unwrap(), device.new_queue().unwrap());
        let mut out = device.upload(&vec![7u32; 1000]).unwrap();
        let cfg = LaunchConfig::for_1d(1000, 128);
        // SAFETY (both launches): one thread per element; the second queue waits for the first.
        unsafe {
            device.launch_on(&first, &DELAYED_APPEND_DIGIT, cfg, (20_000_000u64, 1, &mut out)).unwrap()
        };
        let mark = device.mark_on(&first).unwrap();
        device.queue_wait(&second, mark).unwrap();
        unsafe { device.launch_on(&second, &DELAYED_APPEND_DIGIT, cfg, (0u64, 2, &mut out)).unwrap() };
        device.sync_queue(&second).unwrap();
        // The host waited for the second queue only: its kernel ran after the first's.
        assert_eq!(device.download(&out).unwrap(), vec![712; 1000], "on {}", device.describe());
    }
}

#[test]
fn a_poisoned_allocation_is_filled_before_another_queue_writes_it() {
    for device in common::devices("a_poisoned_allocation_is_filled_before_another_queue_writes_it") {
        let other = device.new_queue().unwrap();
        let cfg = LaunchConfig::for_1d(1000, 128);
        let mut busy = device.upload(&vec![3u32; 1000]).unwrap();
        // SAFETY: one thread per element. The device's queue is kept busy for a while...
        unsafe { device.launch(&DELAYED_APPEND_DIGIT, cfg, (20_000_000u64, 1, &mut busy)).unwrap() };
        // ...while a poisoned buffer is written on another queue.
        let mut out = device.alloc::<u32>(1000).unwrap();
        let values: Vec<u32> = (0..1000).collect();
        // SAFETY: `values` outlives the queue's synchronisation below; one thread per element.
        unsafe {
            device.upload_async(&other, &values, &mut out).unwrap();
            device.launch_on(&other, &DELAYED_APPEND_DIGIT, cfg, (0u64, 2, &mut out)).unwrap();
        }
        device.sync_queue(&other).unwrap();
        device.synchronize().unwrap();
        let expected: Vec<u32> = values.iter().map(|v| 10 * v + 2).collect();
        assert_eq!(device.download(&out).unwrap(), expected, "on {}", device.describe());
        assert_eq!(device.download(&busy).unwrap(), vec![31; 1000], "on {}", device.describe());
    }
}

#[test]
fn a_captured_graph_replays_its_launches() {
    let x = common::random_vec(&mut common::rng(34), 1000, -1.0, 1.0);
    let y0 = common::random_vec(&mut common::rng(35), 1000, -1.0, 1.0);
    for device in common::devices("a_captured_graph_replays_its_launches") {
        let dx = device.upload(&x).unwrap();
        let mut dy = device.upload(&y0).unwrap();
        let cfg = LaunchConfig::for_1d(1000, 128);
        {
            let mut graph = device
                .capture(|| {
                    // SAFETY (both launches): one thread per element.
                    unsafe { device.launch(&kernels::saxpy::SAXPY, cfg, (2.0f32, &dx, &mut dy))? };
                    unsafe { device.launch(&kernels::saxpy::SAXPY, cfg, (-0.5f32, &dx, &mut dy)) }
                })
                .unwrap();
            for _ in 0..3 {
                device.replay(&mut graph).unwrap();
            }
        }
        // Captured, not run: three replays of two launches.
        let mut expected = y0.clone();
        for _ in 0..3 {
            for a in [2.0f32, -0.5] {
                expected.iter_mut().zip(&x).for_each(|(y, &x)| *y = a.mul_add(x, *y));
            }
        }
        assert_eq!(device.download(&dy).unwrap(), expected, "on {}", device.describe());
    }
}

#[test]
fn a_capture_that_waits_for_the_device_fails_cleanly() {
    let Some(device) = common::gpu_or_skip("a_capture_that_waits_for_the_device_fails_cleanly") else {
        return;
    };
    let dx = device.upload(&[1.0f32; 64]).unwrap();
    let err = device.capture(|| device.download(&dx).map(drop)).err().expect("a download cannot be captured");
    assert!(err.to_string().contains("may only queue device work"), "{err}");
    // The device still works.
    assert_eq!(device.download(&dx).unwrap(), vec![1.0f32; 64]);
}

/// A buffer the device cannot hold is an `OutOfMemory` error that says so (with the free memory on
/// a GPU), never an abort of the process, and the device stays usable.
#[test]
fn a_buffer_larger_than_the_memory_is_an_out_of_memory_error() {
    for device in common::devices("a_buffer_larger_than_the_memory_is_an_out_of_memory_error") {
        // 8 PiB, and a size whose bytes do not fit a usize.
        for (len, mib) in
            [(1usize << 50, 1u128 << 33), (usize::MAX, (usize::MAX as u128 * 8).div_ceil(1 << 20))]
        {
            let err = device.alloc::<f64>(len).err().expect("no device holds this");
            assert!(matches!(err, kernel_suite::Error::OutOfMemory { .. }), "{err:?}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("out of memory: a buffer of {mib} MiB does not fit")),
                "{text}"
            );
            assert_eq!(text.contains(" MiB free)"), device.backend() == Backend::Gpu, "{text}");
        }
        let buffer = device.upload(&[1.5f64, -2.0]).unwrap();
        assert_eq!(device.download(&buffer).unwrap(), vec![1.5, -2.0]);
    }
}
