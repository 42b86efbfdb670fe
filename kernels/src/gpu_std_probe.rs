//! Probe kernels for the tests of the device library's primitives (`tests/gpu_std.rs`): atomics
//! under contention, warp and block collectives, 3-D indices, printf and assert, half precision.
//! Each writes what it computed so that the test compares it with an exact CPU answer, in the
//! simulator and on the GPU.

use gpu_std::atomic::{Ordering, Scope};
use gpu_std::grid::GridBarrier;
use gpu_std::half::{from_bf16, from_f16, to_bf16, to_f16};
use gpu_std::{block, gpu_assert, kernel, printf, shared, thread, warp};

/// Slots per key of [`atomic_contention`]'s outputs: see there.
pub const ATOMIC_SLOTS: usize = 4;

/// Every element `i` (key `k = keys[i]`, value `v = values[i]`) updates key `k`'s slots of each
/// output with every kind of atomic, so that all threads of all blocks with one key contend:
///
/// * `u32s[4k..]`: `+= 1` (`red`), `max(v + 1000)`, `min(v + 1000)`, `^= i`;
/// * `i32s[4k..]`: `+= v`, `min(v)`, `max(v)`, `&= !(1 << (i % 31))`;
/// * `u64s[4k..]`: `+= (v + 1000) << 20` (fetch), `|= 1 << (i % 64)`, `max(i · 2^33)`, `^= i << 32`;
/// * `i64s[4k..]`: `+= v · 3·10^9`, `min(v · 10^9)`, `max(v · 10^9)`, `|= i`;
/// * `f32s[4k..]`: `+= v` (`red`), `+= v / 2` (fetch), `min(v / 4)`, `max(v / 4)`;
/// * `f64s[4k..]`: `+= v / 4`, `min(v)`, `max(v)`, `+= 1` (release, system scope);
/// * `claims[k]`: compare-and-swap from `u32::MAX` to `i`: the one winner sets `won[i] = 1`;
/// * `last[k]`: swap in `i`; `previous[i]` gets what was there (a chain through every `i` of `k`).
///
/// Values are small integers, so every float sum is exact in any order.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub fn atomic_contention(
    keys: &[u32],
    values: &[i32],
    u32s: &mut [u32],
    i32s: &mut [i32],
    u64s: &mut [u64],
    i64s: &mut [i64],
    f32s: &mut [f32],
    f64s: &mut [f64],
    claims: &mut [u32],
    won: &mut [u32],
    last: &mut [u32],
    previous: &mut [u32],
) {
    let i = thread::index_1d() as usize;
    if i >= keys.len() || i >= values.len() {
        return;
    }
    let (k, v) = (keys[i] as usize, values[i]);
    let s = ATOMIC_SLOTS * k;
    u32s.atomic(s).add(1);
    u32s.atomic(s + 1).fetch_max((v + 1000) as u32);
    u32s.atomic(s + 2).fetch_min((v + 1000) as u32);
    u32s.atomic(s + 3).fetch_xor(i as u32);
    i32s.atomic(s).fetch_add(v);
    i32s.atomic(s + 1).fetch_min(v);
    i32s.atomic(s + 2).fetch_max(v);
    i32s.atomic(s + 3).fetch_and(!(1 << (i % 31)));
    u64s.atomic(s).fetch_add(((v + 1000) as u64) << 20);
    u64s.atomic(s + 1).fetch_or(1 << (i % 64));
    u64s.atomic(s + 2).fetch_max((i as u64) << 33);
    u64s.atomic(s + 3).fetch_xor((i as u64) << 32);
    i64s.atomic(s).add(v as i64 * 3_000_000_000);
    i64s.atomic(s + 1).fetch_min(v as i64 * 1_000_000_000);
    i64s.atomic(s + 2).fetch_max(v as i64 * 1_000_000_000);
    i64s.atomic(s + 3).fetch_or(i as i64);
    f32s.atomic(s).add(v as f32);
    f32s.atomic(s + 1).fetch_add(v as f32 / 2.0);
    f32s.atomic(s + 2).fetch_min(v as f32 / 4.0);
    f32s.atomic(s + 3).fetch_max(v as f32 / 4.0);
    f64s.atomic(s).fetch_add(v as f64 / 4.0);
    f64s.atomic(s + 1).fetch_min(v as f64);
    f64s.atomic(s + 2).fetch_max(v as f64);
    f64s.atomic(s + 3).with_ordering(Ordering::Release).with_scope(Scope::System).add(1.0);
    if claims.atomic(k).compare_exchange(u32::MAX, i as u32).is_ok() {
        won[i] = 1;
    }
    previous[i] = last.atomic(k).with_ordering(Ordering::AcqRel).swap(i as u32);
}

/// Dynamic shared memory of [`shared_histogram_probe`]: `bins` u32 counters.
pub const fn shared_histogram_layout(bins: u32) -> shared::Layout {
    shared::Layout::new().array::<u32>(bins as usize)
}

/// Counts `x[i] % bins` per block in shared memory (atomics at block scope), then adds each
/// block's counts to `hist` (global atomics): a privatised histogram over a grid-stride loop.
#[kernel]
pub fn shared_histogram_probe(x: &[u32], bins: u32, hist: &mut [u32]) {
    let counts = shared::Allocator::new().array::<u32>(bins as usize);
    let t = thread::thread_idx_x();
    let mut b = t;
    while b < bins {
        // SAFETY: `b < bins`, the array's length; each counter zeroed by one thread.
        unsafe { counts.write(b as usize, 0) };
        b += thread::block_dim_x();
    }
    thread::sync_threads();
    let mut i = thread::index_1d() as usize;
    while i < x.len() {
        // SAFETY: `x[i] % bins < bins`.
        unsafe { counts.atomic((x[i] % bins) as usize).add(1) };
        i += thread::grid_stride_1d() as usize;
    }
    thread::sync_threads();
    let mut b = t;
    while b < bins {
        // SAFETY: `b < bins`; the counts are final after the barrier.
        let c = unsafe { counts.read(b as usize) };
        if c > 0 {
            hist.atomic(b as usize).add(c);
        }
        b += thread::block_dim_x();
    }
}

/// Block 0 writes `data` and then raises `flag` with a release store; every other block waits for
/// the flag with acquire loads and copies `data` to its part of `seen` (as many elements as there
/// are threads per block). Launch with 1-D blocks, at most as many blocks as fit on the GPU at
/// once (the waiting blocks spin).
#[kernel]
pub fn message_passing(data: &mut [u32], flag: &mut [u32], seen: &mut [u32]) {
    let t = thread::thread_idx_x() as usize;
    let n = thread::block_dim_x() as usize;
    if thread::block_idx_x() == 0 {
        if t < data.len() {
            data[t] = 7 * t as u32 + 1;
        }
        thread::sync_threads();
        if t == 0 {
            flag.atomic(0).with_ordering(Ordering::Release).store(1);
        }
    } else {
        if t == 0 {
            while flag.atomic(0).with_ordering(Ordering::Acquire).load() == 0 {}
        }
        thread::sync_threads();
        let at = (thread::block_idx_x() as usize - 1) * n + t;
        if t < data.len() && at < seen.len() {
            seen[at] = data.atomic(t).load();
        }
    }
}

/// In each of `rounds` rounds every thread writes a value of its own for the round
/// (`values[(round·blocks + block)·threads + thread]`), the blocks meet at a
/// [`GridBarrier`], and thread 0 of each block writes the wrapping sum
/// of the round's values of every block to `out[round·blocks + block]`: a block that passed the
/// barrier early, or saw another's writes late, reads values not yet written. A cooperative launch
/// of 1-D blocks; `counter` one `u32`, zero at the launch.
#[kernel]
pub fn grid_barrier_probe(rounds: u32, counter: &mut [u32], values: &mut [u32], out: &mut [u32]) {
    let (t, threads) = (thread::thread_idx_x(), thread::block_dim_x());
    let (g, blocks) = (thread::block_idx_x(), thread::grid_dim_x());
    assert!(!counter.is_empty(), "the barrier's counter");
    // SAFETY: one u32 of global memory, zero at the launch (the caller's contract), used only by
    // this barrier of all the grid's blocks, resident at once (a cooperative launch).
    let barrier = unsafe { GridBarrier::new(counter.as_mut_ptr(), blocks) };
    for round in 0..rounds {
        let first = (round * blocks * threads) as usize;
        values[first + (g * threads + t) as usize] = grid_barrier_value(round, g, t);
        barrier.sync();
        if t == 0 {
            let mut sum = 0u32;
            for j in 0..(blocks * threads) as usize {
                sum = sum.wrapping_add(values[first + j]);
            }
            out[(round * blocks + g) as usize] = sum;
        }
    }
}

/// The value thread `t` of block `g` writes in `round` of [`grid_barrier_probe`].
pub const fn grid_barrier_value(round: u32, g: u32, t: u32) -> u32 {
    round.wrapping_mul(2_654_435_761) ^ (g * 1000 + t + 1)
}

/// Results per thread of [`warp_probe`].
pub const WARP_RESULTS: usize = 20;

/// Every warp collective on `x` (one value per thread), results in `out[WARP_RESULTS·i + j]`:
/// shuffles up 3, down 5, xor 6 and from lane 9 (u32), up 1 of an `i64` and a `bool`, down 1 of a
/// `u8`; ballot/any/all of `x` odd; match-any of `x % 4`, match-all of `x / 2^30`; `redux` add,
/// min (as i32), max, and, or, xor; the warp's f64 sum through [`warp::reduce`]; the inclusive
/// (u32) and exclusive (u64) scans; `activemask` inside `if x is odd`; and among the even lanes
/// only (mask `0x5555_5555`), the value of lane `lane ^ 2`.
#[kernel]
pub fn warp_probe(x: &[u32], out: &mut [u32]) {
    let i = thread::index_1d() as usize;
    let v = x[i];
    let lane = warp::lane_id();
    let full = warp::FULL_MASK;
    let odd = v % 2 == 1;
    let o = WARP_RESULTS * i;
    out[o] = warp::shfl_up_sync(full, v, 3);
    out[o + 1] = warp::shfl_down_sync(full, v, 5);
    out[o + 2] = warp::shfl_xor_sync(full, v, 6);
    out[o + 3] = warp::shfl_sync(full, v, 9);
    out[o + 4] = warp::shfl_up_sync(full, -(v as i64) * 1_000_000_007, 1) as u32
        ^ (warp::shfl_up_sync(full, odd, 1) as u32) << 31
        ^ (warp::shfl_down_sync(full, v as u8, 1) as u32) << 8;
    out[o + 5] = warp::ballot_sync(full, odd);
    out[o + 6] = warp::any_sync(full, odd) as u32 | (warp::all_sync(full, odd) as u32) << 1;
    out[o + 7] = warp::match_any_sync(full, v % 4);
    out[o + 8] = warp::match_all_sync(full, v >> 30).unwrap_or(0xdead);
    out[o + 9] = warp::reduce_add_sync(full, v);
    out[o + 10] = warp::reduce_min_sync(full, v as i32) as u32;
    out[o + 11] = warp::reduce_max_sync(full, v);
    out[o + 12] = warp::reduce_and_sync(full, v);
    out[o + 13] = warp::reduce_or_sync(full, v);
    out[o + 14] = warp::reduce_xor_sync(full, v);
    out[o + 15] = (warp::reduce(v as f64 * 0.5, |a, b| a + b) * 2.0) as u64 as u32;
    out[o + 16] = warp::inclusive_scan(v, |a, b| a.wrapping_add(b));
    let (before, total) = warp::exclusive_scan(v as u64, |a, b| a + b, 0);
    out[o + 17] = (before % 1_000_003) as u32 ^ ((total % 1_000_003) as u32) << 12;
    out[o + 18] = if odd { warp::activemask() } else { 0 };
    out[o + 19] = if lane.is_multiple_of(2) { warp::shfl_xor_sync(0x5555_5555, v, 2) } else { u32::MAX };
}

/// Results per thread of [`block_probe`].
pub const BLOCK_RESULTS: usize = 6;

/// Dynamic shared memory of [`block_probe`] for blocks of `threads` threads.
pub const fn block_probe_layout(threads: u32) -> shared::Layout {
    shared::Layout::new().array::<u64>(block::scratch_len(threads)).array::<f32>(block::scratch_len(threads))
}

/// The block collectives on `x`, results in `out[BLOCK_RESULTS·i + j]`: how many threads of the
/// block have `x` odd (`sync_threads_count`), whether all and whether any do, the block's u64 sum
/// (low 32 bits), its f32 maximum (as an integer), and each thread's inclusive and exclusive u64 prefix sums (low
/// 32 bits, packed as `inclusive ^ exclusive << 16`). Launch with 1-D blocks of whole warps.
#[kernel]
pub fn block_probe(x: &[u32], out: &mut [u32]) {
    let i = thread::index_1d() as usize;
    let v = x[i];
    let mut smem = shared::Allocator::new();
    let sums = smem.scratch::<u64>(shared::Threads::block());
    let maxima = smem.scratch::<f32>(shared::Threads::block());
    let o = BLOCK_RESULTS * i;
    out[o] = block::sync_threads_count(v % 2 == 1);
    out[o + 1] =
        block::sync_threads_and(v % 2 == 1) as u32 | (block::sync_threads_or(v % 2 == 1) as u32) << 1;
    out[o + 2] = block::reduce(v as u64, |a, b| a + b, &sums) as u32;
    out[o + 3] = block::reduce(v as f32, f32::max, &maxima) as u32;
    let (inclusive, total) = block::inclusive_scan(v as u64, |a, b| a + b, &sums);
    let (exclusive, total_again) = block::exclusive_scan(v as u64, |a, b| a + b, 0, &sums);
    out[o + 4] = inclusive as u32 ^ (exclusive as u32) << 16;
    out[o + 5] = (total == total_again) as u32;
}

/// Writes `x + 1000·y + 10^6·z` at `out[(z·height + y)·width + x]` for each thread of a 3-D launch
/// over `width × height × depth`.
#[kernel]
pub fn index_3d_probe(width: u32, height: u32, depth: u32, out: &mut [u32]) {
    let (x, y, z) = thread::index_3d();
    if x < width && y < height && z < depth {
        out[((z * height + y) * width + x) as usize] = x + 1000 * y + 1_000_000 * z;
    }
}

/// Prints one line per thread: its global index as `%d`, `%u`, `%llu`, `%5.2f` and `%g` of `x[i]`.
#[kernel]
pub fn printf_probe(x: &[f32]) {
    let i = thread::index_1d();
    if (i as usize) < x.len() {
        printf!(
            "probe %d %u %llu %5.2f %g\n",
            i as i32,
            i,
            i as u64 * 1_000_000_007,
            x[i as usize],
            x[i as usize] as f64
        );
    }
}

/// Fails a `gpu_assert!` in every thread whose `x[i]` is at least `limit`.
#[kernel]
pub fn assert_probe(x: &[u32], limit: u32, out: &mut [u32]) {
    let i = thread::index_1d() as usize;
    if i < x.len() && i < out.len() {
        gpu_assert!(x[i] < limit, "x[%u] = %u is not below %u", i as u32, x[i], limit);
        out[i] = x[i];
    }
}

/// Converts `x` to f16 and bf16 (bits in `f16_bits`, `bf16_bits`) and back (`f16_back`,
/// `bf16_back`).
#[kernel]
pub fn half_probe(
    x: &[f32],
    f16_bits: &mut [u16],
    bf16_bits: &mut [u16],
    f16_back: &mut [f32],
    bf16_back: &mut [f32],
) {
    let i = thread::index_1d() as usize;
    if i < x.len() && i < f16_bits.len() && i < bf16_bits.len() && i < f16_back.len() && i < bf16_back.len() {
        let (h, b) = (to_f16(x[i]), to_bf16(x[i]));
        f16_bits[i] = h.to_bits();
        bf16_bits[i] = b.to_bits();
        f16_back[i] = from_f16(h);
        bf16_back[i] = from_bf16(b);
    }
}

/// After `cycles` cycles of the SM clock, `out[i] = 10·out[i] + digit` for every element: which of
/// two launches on different queues ran first shows in the digits.
#[kernel]
pub fn delayed_append_digit(cycles: u64, digit: u32, out: &mut [u32]) {
    let i = thread::index_1d() as usize;
    if i < out.len() {
        thread::spin_cycles(cycles);
        out[i] = 10 * out[i] + digit;
    }
}
