//! CPU simulator: runs a kernel launch on CPU threads, like Numba's CUDA simulator.
//!
//! Every thread of a block is an OS thread, so the threads of a block run concurrently and
//! [`sync_threads`](crate::thread::sync_threads) is a real barrier (a thread that returned no longer
//! counts, as on the GPU). Blocks run one after the other within a group of threads; several
//! groups (one per CPU core) run different blocks at the same time. Shared memory is filled with
//! `0xff` bytes (a NaN for floats) before each block, so a kernel that reads what it never wrote
//! shows it. Named barriers ([`barrier_sync`](crate::thread::barrier_sync)) count the threads that
//! arrive, as the hardware counts whole warps; a thread that arrives for a different number of
//! threads than its round's is an error, and so is a round still incomplete after
//! [`NAMED_BARRIER_PATIENCE`] (on the GPU, a hang). Any panic in a kernel — an out-of-range
//! shared-memory access included — stops the launch and is re-raised with the kernel's name, the
//! block and the thread.
//!
//! It is for correctness, not speed.

use crate::kernel_fn::KernelFn;
use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Condvar, Mutex, MutexGuard};

/// Three-dimensional extent or index, `x` fastest-varying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim3 {
    /// x (columns for images).
    pub x: u32,
    /// y (rows for images).
    pub y: u32,
    /// z.
    pub z: u32,
}

impl Dim3 {
    /// `(x, 1, 1)`.
    pub const fn x(x: u32) -> Self {
        Self { x, y: 1, z: 1 }
    }
    /// `(x, y, 1)`.
    pub const fn xy(x: u32, y: u32) -> Self {
        Self { x, y, z: 1 }
    }
    /// `x·y·z`.
    pub fn volume(self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
    fn unflatten(self, i: u64) -> Dim3 {
        let (x, y) = (self.x as u64, self.y as u64);
        Dim3 { x: (i % x) as u32, y: (i / x % y) as u32, z: (i / (x * y)) as u32 }
    }
}

impl fmt::Display for Dim3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.x, self.y, self.z)
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads per block.
    pub block: Dim3,
    /// Bytes of dynamic shared memory per block.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch covering `n` threads with blocks of `block` threads.
    pub fn for_1d(n: usize, block: u32) -> Self {
        let blocks = n.div_ceil(block.max(1) as usize).max(1);
        Self { grid: Dim3::x(blocks as u32), block: Dim3::x(block), shared_bytes: 0 }
    }

    /// A 1-D launch for a grid-stride loop over `n` elements: blocks of `block` threads, at most
    /// `max_blocks` of them (each thread then takes every `gridDim.x·blockDim.x`-th element).
    pub fn for_grid_stride(n: usize, block: u32, max_blocks: u32) -> Self {
        let mut cfg = Self::for_1d(n, block);
        cfg.grid.x = cfg.grid.x.min(max_blocks.max(1));
        cfg
    }

    /// A 2-D launch covering a `width × height` image (x = column) with `bx × by` blocks.
    pub fn for_2d(width: usize, height: usize, bx: u32, by: u32) -> Self {
        let gx = width.div_ceil(bx.max(1) as usize).max(1);
        let gy = height.div_ceil(by.max(1) as usize).max(1);
        Self { grid: Dim3::xy(gx as u32, gy as u32), block: Dim3::xy(bx, by), shared_bytes: 0 }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub fn with_shared_bytes(self, bytes: u32) -> Self {
        Self { shared_bytes: bytes, ..self }
    }

    /// Checks the limits every CUDA GPU of compute capability 7.0 or newer enforces.
    pub fn validate(&self) -> Result<(), SimError> {
        let (g, b) = (self.grid, self.block);
        if g.volume() == 0 || b.volume() == 0 {
            return Err(SimError(format!("empty launch: grid {g}, block {b}")));
        }
        if b.volume() > 1024 || b.z > 64 {
            return Err(SimError(format!(
                "block {b} has {} threads; at most 1024 (and z ≤ 64) are allowed",
                b.volume()
            )));
        }
        if g.y > 65535 || g.z > 65535 {
            return Err(SimError(format!("grid {g}: y and z are limited to 65535")));
        }
        Ok(())
    }
}

/// Why the simulator refused a launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

/// What the device layer reads about the current simulated thread.
#[derive(Clone, Copy)]
pub(crate) struct ThreadState {
    pub thread_idx: Dim3,
    pub block_idx: Dim3,
    pub block_dim: Dim3,
    pub grid_dim: Dim3,
    pub shared_bytes: usize,
    rank: usize,
    block: *const BlockState,
}

thread_local! {
    static CURRENT: Cell<Option<ThreadState>> = const { Cell::new(None) };
}

/// Runs `f` on the current simulated thread's state.
pub(crate) fn with_thread<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    match CURRENT.with(Cell::get) {
        Some(state) => f(&state),
        None => panic!("a device function was called outside a kernel launch (use the simulator)"),
    }
}

fn with_block<R>(f: impl FnOnce(&ThreadState, &BlockState) -> R) -> R {
    with_thread(|t| {
        // SAFETY: `block` points into the launch's group state, alive while the thread runs.
        let block = unsafe { &*t.block };
        f(t, block)
    })
}

pub(crate) fn sync_threads() {
    with_block(|_, b| b.barrier.wait());
}

pub(crate) fn named_barrier(id: u32, threads: u32, wait: bool) {
    assert!(
        (1..crate::thread::NAMED_BARRIERS).contains(&id),
        "named barrier {id} outside 1..{}",
        crate::thread::NAMED_BARRIERS
    );
    assert!(threads > 0 && threads.is_multiple_of(32), "named barrier {id} for {threads} threads");
    with_block(|_, b| b.named[id as usize].arrive_named(id, threads as usize, wait));
}

pub(crate) fn shared_region(byte_offset: usize, len: usize, size: usize, align: usize) -> *mut u8 {
    with_block(|t, b| {
        let end = len.checked_mul(size).and_then(|bytes| bytes.checked_add(byte_offset));
        if end.is_none_or(|end| end > t.shared_bytes) {
            panic!(
                "shared memory region of {len} × {size} bytes at byte offset {byte_offset} does not \
                 fit in the launch's {} bytes of dynamic shared memory",
                t.shared_bytes
            );
        }
        if !byte_offset.is_multiple_of(align) {
            panic!("shared memory region at byte offset {byte_offset} is not aligned to {align} bytes");
        }
        // SAFETY: in bounds of the block's shared buffer, checked above.
        unsafe { b.shared_base().add(byte_offset) }
    })
}

pub(crate) fn shared_out_of_range(index: usize, len: usize) -> ! {
    panic!("shared memory index {index} out of range for a region of {len} elements")
}

pub(crate) fn shuffle(mode: crate::warp::Mode, bits: u64, lane_arg: u32) -> u64 {
    use crate::warp::Mode;
    with_block(|t, b| {
        let warp = t.rank / 32;
        let lane = (t.rank % 32) as u32;
        let base = warp * 32;
        let warp_len = (b.threads - base).min(32) as u32;
        b.slots[t.rank].store(bits, Ordering::Relaxed);
        b.warps[warp].wait();
        let src = match mode {
            Mode::Down => lane.saturating_add(lane_arg),
            Mode::Xor => lane ^ lane_arg,
            Mode::Idx => lane_arg & 31,
        };
        let value = if src < warp_len { b.slots[base + src as usize].load(Ordering::Relaxed) } else { bits };
        b.warps[warp].wait();
        value
    })
}

/// Words per lane that [`warp_gather`] can exchange.
const GATHER_WORDS: usize = 4;

/// Every lane's `W` words, indexed by lane: the exchange behind the warp-level MMAs. All 32 lanes
/// of the warp must call it together.
pub(crate) fn warp_gather<const W: usize>(mine: [u64; W]) -> [[u64; W]; 32] {
    const { assert!(W <= GATHER_WORDS) };
    with_block(|t, b| {
        let warp = t.rank / 32;
        let base = warp * 32;
        if b.threads - base < 32 {
            panic!("a warp-level MMA needs all 32 lanes; warp {warp} has {}", b.threads - base);
        }
        for (w, &word) in mine.iter().enumerate() {
            b.gather[t.rank * GATHER_WORDS + w].store(word, Ordering::Relaxed);
        }
        b.warps[warp].wait();
        let all = std::array::from_fn(|lane| {
            std::array::from_fn(|w| b.gather[(base + lane) * GATHER_WORDS + w].load(Ordering::Relaxed))
        });
        b.warps[warp].wait();
        all
    })
}

/// The byte offset of `ptr` in the block's dynamic shared memory: the simulator's shared-window
/// address.
pub(crate) fn shared_offset(ptr: *const u8) -> u32 {
    with_block(|t, b| {
        let offset = (ptr as usize).wrapping_sub(b.shared_base() as usize);
        if offset > t.shared_bytes {
            panic!("{ptr:p} is not an address in the block's dynamic shared memory");
        }
        offset as u32
    })
}

/// A pointer to the `len` bytes at shared-window address `address`, checked against the launch's
/// dynamic shared memory.
pub(crate) fn shared_bytes_at(address: u32, len: usize) -> *mut u8 {
    with_block(|t, b| {
        if address as usize + len > t.shared_bytes {
            panic!(
                "shared address {address} + {len} bytes is past the launch's {} bytes of dynamic \
                 shared memory",
                t.shared_bytes
            );
        }
        // SAFETY: in bounds of the block's shared buffer, checked above.
        unsafe { b.shared_base().add(address as usize) }
    })
}

/// How long a thread waits at a named barrier before the simulator reports the round as stuck.
pub const NAMED_BARRIER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// A barrier whose party shrinks as threads return, and that can be abandoned when a thread panics.
struct GroupBarrier {
    state: Mutex<BarrierState>,
    cv: Condvar,
}

struct BarrierState {
    live: usize,
    arrived: usize,
    generation: u64,
    abandoned: bool,
}

/// Unwind payload of a thread released from a barrier because another thread panicked.
struct Abandoned;

impl GroupBarrier {
    fn new() -> Self {
        let state = BarrierState { live: 0, arrived: 0, generation: 0, abandoned: false };
        Self { state: Mutex::new(state), cv: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, BarrierState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reset(&self, live: usize) {
        let mut s = self.lock();
        s.live = live;
        s.arrived = 0;
        s.abandoned = false;
    }

    fn release(&self, s: &mut BarrierState) {
        s.arrived = 0;
        s.generation += 1;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut s = self.lock();
        if s.abandoned {
            drop(s);
            panic::resume_unwind(Box::new(Abandoned));
        }
        s.arrived += 1;
        if s.arrived == s.live {
            self.release(&mut s);
            return;
        }
        self.block(s, None);
    }

    /// One thread at a named barrier whose round expects `parties` threads (fixed by the round's
    /// first arrival); with `wait`, returns when the round completes.
    fn arrive_named(&self, id: u32, parties: usize, wait: bool) {
        let mut s = self.lock();
        if s.abandoned {
            drop(s);
            panic::resume_unwind(Box::new(Abandoned));
        }
        if s.arrived == 0 {
            s.live = parties;
        }
        let expected = s.live;
        if expected != parties {
            drop(s);
            panic!("named barrier {id}: a thread arrived for {parties} threads in a round of {expected}");
        }
        s.arrived += 1;
        if s.arrived == s.live {
            self.release(&mut s);
        } else if wait {
            self.block(s, Some(id));
        }
    }

    /// Waits, holding `s`, until the current round completes (or the launch is abandoned); at named
    /// barrier `named` for at most [`NAMED_BARRIER_PATIENCE`].
    fn block(&self, mut s: MutexGuard<'_, BarrierState>, named: Option<u32>) {
        let generation = s.generation;
        let start = std::time::Instant::now();
        while s.generation == generation && !s.abandoned {
            s = match named {
                None => self.cv.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(id) => {
                    let waited = start.elapsed();
                    if waited >= NAMED_BARRIER_PATIENCE {
                        let (arrived, expected) = (s.arrived, s.live);
                        drop(s);
                        panic!(
                            "named barrier {id}: {arrived} of {expected} threads arrived, the rest \
                             never came ({waited:?})"
                        );
                    }
                    self.cv
                        .wait_timeout(s, NAMED_BARRIER_PATIENCE - waited)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        if s.generation == generation {
            drop(s);
            panic::resume_unwind(Box::new(Abandoned));
        }
    }

    /// The calling thread returned from the kernel: it no longer takes part.
    fn leave(&self) {
        let mut s = self.lock();
        s.live -= 1;
        if s.arrived > 0 && s.arrived == s.live {
            self.release(&mut s);
        }
    }

    fn abandon(&self) {
        self.lock().abandoned = true;
        self.cv.notify_all();
    }
}

/// State of the block a group of threads is currently running.
struct BlockState {
    threads: usize,
    shared: Vec<u128>,
    barrier: GroupBarrier,
    named: Vec<GroupBarrier>,
    warps: Vec<GroupBarrier>,
    slots: Vec<AtomicU64>,
    gather: Vec<AtomicU64>,
}

impl BlockState {
    fn new(threads: usize, shared_bytes: usize) -> Self {
        Self {
            threads,
            shared: vec![u128::MAX; shared_bytes.div_ceil(16)],
            barrier: GroupBarrier::new(),
            named: (0..crate::thread::NAMED_BARRIERS).map(|_| GroupBarrier::new()).collect(),
            warps: (0..threads.div_ceil(32)).map(|_| GroupBarrier::new()).collect(),
            slots: (0..threads).map(|_| AtomicU64::new(0)).collect(),
            gather: (0..threads * GATHER_WORDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn shared_base(&self) -> *mut u8 {
        self.shared.as_ptr() as *mut u8
    }

    /// Called by rank 0 while every other thread of the group waits at the group barrier.
    fn start_block(&self) {
        // SAFETY: no other thread touches shared memory between the group barriers.
        unsafe {
            std::ptr::write_bytes(self.shared_base(), 0xff, self.shared.len() * 16);
        }
        self.barrier.reset(self.threads);
        self.named.iter().for_each(|b| b.reset(0));
        for (w, warp) in self.warps.iter().enumerate() {
            warp.reset((self.threads - w * 32).min(32));
        }
    }

    fn leave(&self, rank: usize) {
        self.barrier.leave();
        self.warps[rank / 32].leave();
    }

    fn abandon(&self) {
        self.barrier.abandon();
        self.named.iter().for_each(GroupBarrier::abandon);
        self.warps.iter().for_each(GroupBarrier::abandon);
    }
}

struct Failure {
    block: Dim3,
    thread: Dim3,
    message: String,
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// Shared pointer-carrying arguments across the simulator's threads.
struct SyncArgs<A>(A);
// SAFETY: the arguments are device-style pointers and scalars; as on the GPU, which thread touches
// which element is the kernel's contract.
unsafe impl<A> Sync for SyncArgs<A> {}
// SAFETY: as above.
unsafe impl<A> Send for SyncArgs<A> {}

/// Runs `kernel` with `args` over the launch `cfg` on CPU threads and returns when every block has
/// finished.
///
/// # Panics
/// Re-raises a panic of the kernel as `kernel `name` panicked in block (x, y, z), thread (x, y, z):
/// message`.
///
/// # Safety
/// The pointer arguments must be valid for every access the kernel makes, as for a GPU launch.
pub unsafe fn launch<A: Copy>(kernel: &KernelFn<A>, cfg: LaunchConfig, args: A) -> Result<(), SimError> {
    cfg.validate()?;
    let threads = cfg.block.volume() as usize;
    let blocks = cfg.grid.volume();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let groups = cores.min(blocks).max(1) as usize;
    let args = SyncArgs(args);
    let failed = AtomicBool::new(false);
    let failure: Mutex<Option<Failure>> = Mutex::new(None);

    let states: Vec<BlockState> =
        (0..groups).map(|_| BlockState::new(threads, cfg.shared_bytes as usize)).collect();
    let group_barriers: Vec<Barrier> = (0..groups).map(|_| Barrier::new(threads)).collect();
    let group_stops: Vec<AtomicBool> = (0..groups).map(|_| AtomicBool::new(false)).collect();

    std::thread::scope(|scope| {
        for group in 0..groups {
            let (block, group_barrier, stop) = (&states[group], &group_barriers[group], &group_stops[group]);
            for rank in 0..threads {
                let (args, failed, failure) = (&args, &failed, &failure);
                std::thread::Builder::new()
                    .stack_size(1 << 20)
                    .spawn_scoped(scope, move || {
                        let mut b = group as u64;
                        loop {
                            // Rank 0 alone decides whether the group goes on, so that all its
                            // threads leave the loop together.
                            if rank == 0 {
                                let done = b >= blocks || failed.load(Ordering::SeqCst);
                                stop.store(done, Ordering::SeqCst);
                                if !done {
                                    block.start_block();
                                }
                            }
                            group_barrier.wait();
                            if stop.load(Ordering::SeqCst) {
                                break;
                            }
                            let state = ThreadState {
                                thread_idx: cfg.block.unflatten(rank as u64),
                                block_idx: cfg.grid.unflatten(b),
                                block_dim: cfg.block,
                                grid_dim: cfg.grid,
                                shared_bytes: cfg.shared_bytes as usize,
                                rank,
                                block,
                            };
                            CURRENT.with(|c| c.set(Some(state)));
                            let result = panic::catch_unwind(AssertUnwindSafe(|| {
                                kernel.run_on_host(args.0);
                            }));
                            CURRENT.with(|c| c.set(None));
                            block.leave(rank);
                            if let Err(payload) = result {
                                if !payload.is::<Abandoned>() {
                                    let mut slot = failure.lock().unwrap_or_else(|e| e.into_inner());
                                    slot.get_or_insert(Failure {
                                        block: state.block_idx,
                                        thread: state.thread_idx,
                                        message: panic_message(&*payload),
                                    });
                                }
                                failed.store(true, Ordering::SeqCst);
                                block.abandon();
                            }
                            group_barrier.wait();
                            b += groups as u64;
                        }
                    })
                    .expect("the simulator could not spawn a thread");
            }
        }
    });

    if let Some(f) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        panic!(
            "kernel `{}` panicked in block {}, thread {}: {}",
            kernel.name(),
            f.block,
            f.thread,
            f.message
        );
    }
    Ok(())
}
