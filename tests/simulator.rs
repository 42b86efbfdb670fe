//! The CPU simulator's own guarantees: real barriers, exited threads leaving the barrier, named
//! barriers between warps, warp shuffles, out-of-range shared-memory accesses reported with
//! kernel, block, thread and line, and collectives or barriers that can never complete reported
//! instead of hanging.

use gpu_std::{kernel, shared, thread, warp};
use kernel_suite::{Device, Dim3, LaunchConfig};

/// Reverses each block's slice of `x` into `y` through shared memory. Threads whose element is
/// past `n` return before the barrier, as GPU code often does; the rest must still meet.
#[kernel]
pub fn block_reverse(x: &[u32], y: &mut [u32]) {
    let t = thread::thread_idx_x();
    let block = thread::block_dim_x();
    let base = thread::block_idx_x() * block;
    let valid = (x.len_u32() - base).min(block);
    if t >= valid {
        return;
    }
    let tile = shared::dynamic::<u32>();
    // SAFETY: `t` and `valid − 1 − t` are below the block size, the launch's shared u32 count.
    unsafe { tile.write(t as usize, x[(base + t) as usize]) };
    thread::sync_threads();
    y[(base + t) as usize] = unsafe { tile.read((valid - 1 - t) as usize) };
}

/// Writes one element past the end of the shared region from the block's last thread.
#[kernel]
pub fn shared_overrun(out: &mut [f32]) {
    let t = thread::thread_idx_x();
    let tile = shared::dynamic::<f32>();
    // SAFETY: not for the block's last thread, on purpose (the simulator must catch it).
    unsafe { tile.write(t as usize + 1, 1.0) };
    out[t as usize] = 0.0;
}

/// Each thread packs the index of lane `lane ^ 1`, the index of lane 0 and its own lane id.
#[kernel]
pub fn shuffle_probe(out: &mut [u32]) {
    let lane = warp::lane_id();
    let v = thread::index_1d();
    let swapped = warp::shfl_xor_sync(warp::FULL_MASK, v, 1);
    let first = warp::shfl_sync(warp::FULL_MASK, v, 0);
    out[v as usize] = swapped * 100_000 + first * 100 + lane;
}

/// A producer warp (warp 1) hands `x`, 32 values a round, through two shared slots to the consumer
/// warp (warp 0), which stores lane `l + 1`'s value of each round plus the round into `y`: named
/// barrier `1 + slot` publishes a slot, `3 + slot` gives it back, as a warp-specialised kernel's
/// pipeline does.
#[kernel]
pub fn named_barrier_ring(x: &[u32], y: &mut [u32]) {
    let lane = warp::lane_id();
    let rounds = x.len_u32() / 32;
    let slots = shared::dynamic::<u32>();
    for r in 0..rounds {
        let slot = r % 2;
        if thread::thread_idx_x() >= 32 {
            if r >= 2 {
                thread::barrier_sync(3 + slot, 64);
            }
            // SAFETY: 64 shared u32 (the launch's), slot·32 + lane < 64.
            unsafe { slots.write((32 * slot + lane) as usize, x[(32 * r + lane) as usize]) };
            thread::barrier_arrive(1 + slot, 64);
        } else {
            thread::barrier_sync(1 + slot, 64);
            // SAFETY: as above.
            y[(32 * r + lane) as usize] = unsafe { slots.read((32 * slot + (lane + 1) % 32) as usize) } + r;
            if r + 2 < rounds {
                thread::barrier_arrive(3 + slot, 64);
            }
        }
    }
}

/// Lanes 0-15 of each warp shuffle with the full mask; lanes 16-31 return first: on the GPU, a hang
/// or garbage.
#[kernel]
pub fn divergent_shuffle(out: &mut [u32]) {
    let i = thread::index_1d();
    if warp::lane_id() < 16 {
        out[i as usize] = warp::shfl_xor_sync(warp::FULL_MASK, i, 1);
    }
}

/// Both warps of a 64-thread block wait at named barrier 1 for 128 threads.
#[kernel]
pub fn short_named_barrier(out: &mut [u32]) {
    thread::barrier_sync(1, 128);
    out[thread::index_1d() as usize] = 1;
}

/// The error of a launch that must fail in the simulator: its message (the simulated thread's
/// panic).
fn panic_message(launch: impl FnOnce() -> kernel_suite::Result<()>) -> String {
    launch().expect_err("the launch must fail").to_string()
}

#[test]
fn a_shuffle_some_lanes_never_reach_is_reported_instead_of_hanging() {
    let device = Device::simulator();
    let mut out = device.alloc::<u32>(96).unwrap();
    let message = panic_message(|| unsafe {
        device.launch(&DIVERGENT_SHUFFLE, LaunchConfig::for_1d(96, 96), (&mut out,))
    });
    let source = include_str!("simulator.rs");
    let line =
        1 + source.lines().position(|l| l.contains("warp::shfl_xor_sync(warp::FULL_MASK, i, 1)")).unwrap();
    let expected = format!(
        "kernel `divergent_shuffle` cannot go on in block (0, 0, 0): no thread of the block can go on (on the GPU: a \
         hang)\n  warp 0: lanes 0-15 wait at a warp collective (Shuffle(Xor)) over the lanes 0xffffffff \
         (tests/simulator.rs:{line}:"
    );
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("); lanes 16-31 returned\n  warp 1: lanes 0-15 wait"), "{message}");
}

#[test]
fn a_named_barrier_that_never_fills_is_reported_instead_of_hanging() {
    let device = Device::simulator();
    let mut out = device.alloc::<u32>(64).unwrap();
    let message = panic_message(|| unsafe {
        device.launch(&SHORT_NAMED_BARRIER, LaunchConfig::for_1d(64, 64), (&mut out,))
    });
    assert!(message.starts_with("kernel `short_named_barrier` cannot go on in block (0, 0, 0)"), "{message}");
    assert!(
        message.contains("\n  warp 0: lanes 0-31 wait at named barrier 1 (tests/simulator.rs:"),
        "{message}"
    );
    assert!(
        message.contains("\n  warp 1: lanes 0-31 wait at named barrier 1 (tests/simulator.rs:"),
        "{message}"
    );
}

#[test]
fn named_barriers_hand_shared_memory_between_warps() {
    let device = Device::simulator();
    let rounds = 41u32;
    let x: Vec<u32> = (0..32 * rounds).map(|i| i.wrapping_mul(2_654_435_761) >> 7).collect();
    let dx = device.upload(&x).unwrap();
    let mut dy = device.upload(&vec![u32::MAX; x.len()]).unwrap();
    let cfg = LaunchConfig { grid: Dim3::x(3), block: Dim3::x(64), shared_bytes: 64 * 4 };
    for _ in 0..3 {
        unsafe { device.launch(&NAMED_BARRIER_RING, cfg, (&dx, &mut dy)).unwrap() };
        let y = device.download(&dy).unwrap();
        for (i, &got) in y.iter().enumerate() {
            let (r, lane) = (i / 32, i % 32);
            assert_eq!(got, x[32 * r + (lane + 1) % 32] + r as u32, "round {r}, lane {lane}");
        }
    }
}

#[test]
fn barrier_orders_shared_memory_and_tolerates_exited_threads() {
    let device = Device::simulator();
    let n = 1000u32; // 7 full blocks of 128, then a partial block of 104.
    let x: Vec<u32> = (0..n).map(|i| i * 7 + 3).collect();
    let dx = device.upload(&x).unwrap();
    let mut dy = device.alloc::<u32>(n as usize).unwrap();
    let cfg = LaunchConfig::for_1d(n as usize, 128).with_shared_bytes(128 * 4);
    unsafe { device.launch(&BLOCK_REVERSE, cfg, (&dx, &mut dy)).unwrap() };
    let y = device.download(&dy).unwrap();
    for (block, chunk) in x.chunks(128).enumerate() {
        let reversed: Vec<u32> = chunk.iter().rev().copied().collect();
        assert_eq!(&y[block * 128..block * 128 + chunk.len()], &reversed[..], "block {block}");
    }
}

#[test]
fn shared_memory_overrun_names_kernel_block_and_thread() {
    let device = Device::simulator();
    let mut out = device.alloc::<f32>(64 * 3).unwrap();
    let cfg = LaunchConfig { grid: Dim3::x(3), block: Dim3::x(64), shared_bytes: 64 * 4 };
    let message = panic_message(|| unsafe { device.launch(&SHARED_OVERRUN, cfg, (&mut out,)) });
    assert!(
        message.starts_with("kernel `shared_overrun` panicked in block ("),
        "unexpected message: {message}"
    );
    let source = include_str!("simulator.rs");
    let line =
        1 + source.lines().position(|l| l.contains("unsafe { tile.write(t as usize + 1, 1.0) };")).unwrap();
    assert!(
        message.contains(&format!(", 0, 0), thread (63, 0, 0) at tests/simulator.rs:{line}:")),
        "{message}"
    );
    assert!(
        message.contains(": shared memory index 64 out of range for a region of 64 elements"),
        "{message}"
    );
}

#[test]
fn warp_shuffles_exchange_between_lanes() {
    let device = Device::simulator();
    let n = 96usize; // three warps
    let mut out = device.alloc::<u32>(n).unwrap();
    unsafe { device.launch(&SHUFFLE_PROBE, LaunchConfig::for_1d(n, 96), (&mut out,)).unwrap() };
    let got = device.download(&out).unwrap();
    for (i, &g) in got.iter().enumerate() {
        let expected = (i ^ 1) as u32 * 100_000 + (i / 32 * 32) as u32 * 100 + (i % 32) as u32;
        assert_eq!(g, expected, "thread {i}");
    }
}

#[test]
fn launch_limits_are_enforced() {
    let device = Device::simulator();
    let mut out = device.alloc::<f32>(4).unwrap();
    let cfg = LaunchConfig { grid: Dim3::x(1), block: Dim3::x(2048), shared_bytes: 0 };
    let err = unsafe { device.launch(&SHARED_OVERRUN, cfg, (&mut out,)) }.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid launch of kernel `shared_overrun`: block (2048, 1, 1) has 2048 threads; at most 1024 (and z ≤ 64) are allowed"
    );
}
