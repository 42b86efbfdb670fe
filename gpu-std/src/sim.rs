//! CPU simulator: runs a kernel launch on the CPU, like Numba's CUDA simulator, with the GPU's
//! semantics for what the device library offers.
//!
//! Every GPU thread of a block is a coroutine (a stackful one, from `corosensei`), and a block runs
//! on one OS thread: a thread runs until it reaches a barrier or a warp collective, then the next
//! one runs. Blocks are handed out in order to one OS thread per CPU core, so blocks really run at
//! the same time and their global-memory atomics really contend (each atomic also lets the other
//! threads of its block run, so that they interleave there too).
//!
//! * [`sync_threads`](crate::thread::sync_threads) waits for every thread of the block that has
//!   not returned, as on the GPU; its `count`/`and`/`or` forms reduce a predicate on the way.
//! * Named barriers ([`barrier_sync`](crate::thread::barrier_sync)) count the threads that arrive;
//!   a thread that arrives for a different number of threads than its round's is an error.
//! * A warp collective (shuffles, votes, `match`, `redux`, the MMA fragment exchange) completes
//!   when every lane of its mask has called it with the same mask; reading a lane outside the mask
//!   is an error (undefined on the GPU), and so is a mask naming a lane that has returned.
//!   [`activemask`](crate::warp::activemask) gives the lanes that wait at the same call.
//! * When no thread of a block can go on — a collective some lanes never reach, a barrier some
//!   threads skip — the launch stops with a report of which kernel, block, warp and lanes wait
//!   where, instead of hanging as the GPU would.
//! * Shared memory is filled with `0xff` bytes (a NaN for floats) before each block, so a kernel
//!   that reads what it never wrote shows it.
//! * A panic (a failed bounds check, [`gpu_assert!`](crate::gpu_assert)) stops that thread; the
//!   block finishes, no further block starts, and the launch panics once, naming the kernel, the
//!   first failing block and thread, the kernel's source line, and how many other threads failed.
//! * [`printf!`](crate::printf) writes one line per call, prefixed with the block and thread;
//!   [`capture_output`] collects those lines instead, for tests.
//!
//! It is for correctness, not speed; it differs from the GPU in arithmetic overflow (debug test
//! builds check it, the GPU's release code wraps) and in timing (no clock, no concurrency between
//! the threads of a block except at the points above).

use crate::kernel_fn::KernelFn;
use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, Yielder};
use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::fmt::{self, Write as _};
use std::panic::{self, AssertUnwindSafe, Location};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

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
    /// `(x, y, z)`.
    pub const fn xyz(x: u32, y: u32, z: u32) -> Self {
        Self { x, y, z }
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

    /// A 3-D launch covering a `width × height × depth` volume (x = column, y = row, z = slice)
    /// with `block`-shaped blocks.
    pub fn for_3d(width: usize, height: usize, depth: usize, block: Dim3) -> Self {
        let blocks = |n: usize, b: u32| n.div_ceil(b.max(1) as usize).max(1) as u32;
        let grid = Dim3::xyz(blocks(width, block.x), blocks(height, block.y), blocks(depth, block.z));
        Self { grid, block, shared_bytes: 0 }
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

/// What the device library reads about the current simulated thread.
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
    /// Where the last panic of a simulated thread on this OS thread happened (set by the hook).
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The lines [`capture_output`] collects for launches made on this OS thread.
    static CAPTURE: RefCell<Option<Arc<Mutex<Vec<String>>>>> = const { RefCell::new(None) };
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
        // SAFETY: `block` points at the state of the block this OS thread runs, alive while any of
        // its simulated threads runs.
        let block = unsafe { &*t.block };
        f(t, block)
    })
}

/// Runs `f` and returns what it returned with the lines that simulated kernels launched from this
/// OS thread printed meanwhile ([`printf!`](crate::printf), [`gpu_assert!`](crate::gpu_assert)),
/// instead of printing them.
pub fn capture_output<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let sink = Arc::new(Mutex::new(Vec::new()));
    let previous = CAPTURE.with(|c| c.replace(Some(sink.clone())));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CAPTURE.with(|c| *c.borrow_mut() = previous);
    let lines = std::mem::take(&mut *sink.lock().unwrap_or_else(|e| e.into_inner()));
    match result {
        Ok(r) => (r, lines),
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// One line of `printf` output from the current simulated thread, prefixed with its block and
/// thread.
pub(crate) fn print(text: &str) {
    with_block(|t, b| {
        let line = format!("[block {} thread {}] {}", t.block_idx, t.thread_idx, text.trim_end_matches('\n'));
        match &b.sink {
            Some(sink) => sink.lock().unwrap_or_else(|e| e.into_inner()).push(line),
            None => println!("{line}"),
        }
    })
}

/// How a barrier-0 arrival reduces its predicate (`bar.sync` / `bar.red.popc|and|or`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BarrierOp {
    /// `__syncthreads()`.
    Plain,
    /// `__syncthreads_count(p)`.
    Count,
    /// `__syncthreads_and(p)`.
    And,
    /// `__syncthreads_or(p)`.
    Or,
}

/// `__syncthreads()` and its reducing forms: waits for every thread of the block that has not
/// returned; returns the number of threads whose `predicate` held (`Count`), or whether all
/// (`And`) or any (`Or`) did, as 0 or 1.
#[track_caller]
pub(crate) fn sync_threads(op: BarrierOp, predicate: bool) -> u32 {
    let site = Location::caller();
    with_block(|t, b| {
        {
            let mut bar = b.barrier.borrow_mut();
            if bar.arrived > 0 && bar.op != op {
                let (first, first_site) = (bar.op, bar.site);
                drop(bar);
                panic!(
                    "a {op:?} block barrier at {site} meets a {first:?} one at {first_site}: every thread of \
                     a block must reach the same kind of barrier"
                );
            }
            if bar.arrived == 0 {
                bar.op = op;
                bar.site = site;
                bar.count = 0;
            }
            bar.arrived += 1;
            bar.count += predicate as u32;
        }
        if !b.complete_barrier() {
            b.suspend(t.rank, Wait::Barrier { site });
        }
        b.barrier.borrow().result
    })
}

#[track_caller]
pub(crate) fn named_barrier(id: u32, threads: u32, wait: bool) {
    let site = Location::caller();
    assert!(
        (1..crate::thread::NAMED_BARRIERS).contains(&id),
        "named barrier {id} outside 1..{}",
        crate::thread::NAMED_BARRIERS
    );
    assert!(threads > 0 && threads.is_multiple_of(32), "named barrier {id} for {threads} threads");
    with_block(|t, b| {
        let complete = {
            let mut round = b.named[id as usize].borrow_mut();
            if round.arrived == 0 {
                round.expected = threads;
            }
            if round.expected != threads {
                let expected = round.expected;
                drop(round);
                panic!("named barrier {id}: a thread arrived for {threads} threads in a round of {expected}");
            }
            round.arrived += 1;
            let complete = round.arrived == round.expected;
            if complete {
                round.arrived = 0;
            }
            complete
        };
        if complete {
            b.release(|w| matches!(w, Wait::Named { id: i, .. } if i == id));
        } else if wait {
            b.suspend(t.rank, Wait::Named { id, site });
        }
    })
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

#[track_caller]
pub(crate) fn shared_out_of_range(index: usize, len: usize) -> ! {
    panic!("shared memory index {index} out of range for a region of {len} elements")
}

/// What a warp collective computes from the values of the lanes of its mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collective {
    /// `shfl.sync` in one of its modes; each lane's `arg` is its delta, lane mask or source lane.
    Shuffle(crate::warp::Mode),
    /// `vote.ballot`: the lanes whose value is not 0.
    Ballot,
    /// `match.any`: the lanes whose value equals this lane's.
    MatchAny,
    /// `match.all`: the mask if every value is equal, else 0.
    MatchAll,
    /// `redux.sync`: one reduction of every lane's value.
    Reduce(Reduction),
    /// The MMA fragment exchange: every lane gets every lane's words ([`warp_gather`]).
    Gather,
}

/// The reductions of `redux.sync` (32-bit; `Min`/`Max` signed or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduction {
    Add,
    MinU32,
    MaxU32,
    MinI32,
    MaxI32,
    And,
    Or,
    Xor,
}

impl Reduction {
    fn apply(self, a: u64, b: u64) -> u64 {
        let (x, y) = (a as u32, b as u32);
        (match self {
            Reduction::Add => x.wrapping_add(y),
            Reduction::MinU32 => x.min(y),
            Reduction::MaxU32 => x.max(y),
            Reduction::MinI32 => (x as i32).min(y as i32) as u32,
            Reduction::MaxI32 => (x as i32).max(y as i32) as u32,
            Reduction::And => x & y,
            Reduction::Or => x | y,
            Reduction::Xor => x ^ y,
        }) as u64
    }
}

/// A warp collective over the lanes of `mask` (the calling lane among them): waits until each of
/// them has called it with the same mask, and returns this lane's result computed from their
/// `value`s (and, for shuffles, this lane's `arg`).
#[track_caller]
pub(crate) fn warp_collective(mask: u32, op: Collective, value: u64, arg: u32) -> u64 {
    let site = Location::caller();
    with_block(|t, b| {
        let (warp, lane) = (t.rank / 32, (t.rank % 32) as u32);
        if mask & (1 << lane) == 0 {
            panic!("lane {lane} called a warp collective ({op:?}) whose mask {mask:#010x} leaves it out");
        }
        let lanes = mask & b.existing_lanes(warp);
        let returned = (0..32u32)
            .filter(|&l| {
                lanes & (1 << l) != 0 && matches!(b.lanes[warp * 32 + l as usize].status.get(), Status::Done)
            })
            .collect::<Vec<_>>();
        if !returned.is_empty() {
            panic!(
                "warp collective ({op:?}) over the lanes {mask:#010x}, but lane(s) {} of warp {warp} have \
                 returned (undefined on the GPU)",
                lane_list(&returned)
            );
        }
        {
            let mut w = b.warps[warp].borrow_mut();
            w.arrived |= 1 << lane;
            w.pending[lane as usize] = Pending { mask, op, value, arg };
        }
        if !b.complete_collective(warp, lanes, mask, op) {
            b.suspend(t.rank, Wait::Collective { op, mask, site });
        }
        b.lanes[t.rank].result.get()
    })
}

/// Words per lane that [`warp_gather`] can exchange.
const GATHER_WORDS: usize = 4;

/// Every lane's `W` words, indexed by lane: the exchange behind the warp-level MMAs. All 32 lanes
/// of the warp must call it together.
#[track_caller]
pub(crate) fn warp_gather<const W: usize>(mine: [u64; W]) -> [[u64; W]; 32] {
    const { assert!(W <= GATHER_WORDS) };
    with_block(|t, b| {
        let warp = t.rank / 32;
        if b.existing_lanes(warp) != u32::MAX {
            panic!("a warp-level MMA needs all 32 lanes; warp {warp} has {}", b.threads - warp * 32);
        }
        b.warps[warp].borrow_mut().gather_in[t.rank % 32][..W].copy_from_slice(&mine);
    });
    warp_collective(u32::MAX, Collective::Gather, 0, 0);
    with_block(|t, b| {
        let w = b.warps[t.rank / 32].borrow();
        std::array::from_fn(|lane| std::array::from_fn(|i| w.gathered[lane][i]))
    })
}

/// `activemask`: the lanes of this warp that call it at the same place together with this lane.
#[track_caller]
pub(crate) fn active_mask() -> u32 {
    let site = Location::caller();
    with_block(|t, b| {
        b.suspend(t.rank, Wait::ActiveMask { site });
        b.lanes[t.rank].result.get() as u32
    })
}

/// Panics unless the calling thread's warp has all 32 lanes (`what` needs them).
#[track_caller]
pub(crate) fn require_full_warp(what: &str) {
    with_block(|t, b| {
        let warp = t.rank / 32;
        if b.existing_lanes(warp) != u32::MAX {
            panic!("{what} needs all 32 lanes of the warp; warp {warp} has {}", b.threads - warp * 32);
        }
    })
}

/// Lets the other threads of the block run (after an atomic operation, and in spin loops).
pub(crate) fn yield_now() {
    with_block(|t, b| b.suspend(t.rank, Wait::Running))
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

/// `"3, 5-9, 12"` for the lanes (or threads) `[3, 5, 6, 7, 8, 9, 12]`.
fn lane_list(lanes: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < lanes.len() {
        let mut j = i;
        while j + 1 < lanes.len() && lanes[j + 1] == lanes[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        if j == i {
            let _ = write!(out, "{}", lanes[i]);
        } else {
            let _ = write!(out, "{}-{}", lanes[i], lanes[j]);
        }
        i = j + 1;
    }
    out
}

/// What a suspended simulated thread waits for.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// Nothing: it let the others run and goes on at the next turn.
    Running,
    /// Barrier 0 (`sync_threads` and its reducing forms).
    Barrier { site: &'static Location<'static> },
    /// A named barrier.
    Named { id: u32, site: &'static Location<'static> },
    /// A warp collective.
    Collective { op: Collective, mask: u32, site: &'static Location<'static> },
    /// `activemask`.
    ActiveMask { site: &'static Location<'static> },
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Running => f.write_str("running"),
            Wait::Barrier { site } => write!(f, "wait at sync_threads ({site})"),
            Wait::Named { id, site } => write!(f, "wait at named barrier {id} ({site})"),
            Wait::Collective { op, mask, site } => {
                write!(f, "wait at a warp collective ({op:?}) over the lanes {mask:#010x} ({site})")
            }
            Wait::ActiveMask { site } => write!(f, "wait at activemask ({site})"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Status {
    Runnable,
    Waiting(Wait),
    Done,
}

/// What the scheduler passes a simulated thread it resumes.
#[derive(Clone, Copy)]
enum Resume {
    Go,
    /// The launch stopped: unwind (with [`Abandoned`]).
    Abort,
}

/// Unwind payload of a thread stopped because its block cannot go on.
struct Abandoned;

/// Per simulated thread.
struct Lane {
    status: Cell<Status>,
    /// What its last collective or barrier gave it.
    result: Cell<u64>,
    yielder: Cell<*const Yielder<Resume, ()>>,
}

#[derive(Clone, Copy)]
struct Pending {
    mask: u32,
    op: Collective,
    value: u64,
    arg: u32,
}

struct WarpState {
    /// Lanes waiting at a collective.
    arrived: u32,
    pending: [Pending; 32],
    gather_in: [[u64; GATHER_WORDS]; 32],
    gathered: [[u64; GATHER_WORDS]; 32],
}

struct BarrierState {
    arrived: usize,
    op: BarrierOp,
    count: u32,
    result: u32,
    site: &'static Location<'static>,
}

#[derive(Default)]
struct NamedRound {
    expected: u32,
    arrived: u32,
}

/// The block an OS thread runs: its simulated threads' states, barriers and shared memory. Only
/// that OS thread touches it while the block runs.
struct BlockState {
    threads: usize,
    shared: UnsafeCell<Vec<u128>>,
    lanes: Vec<Lane>,
    live: Cell<usize>,
    barrier: RefCell<BarrierState>,
    named: Vec<RefCell<NamedRound>>,
    warps: Vec<RefCell<WarpState>>,
    sink: Option<Arc<Mutex<Vec<String>>>>,
}

impl BlockState {
    fn new(threads: usize, shared_bytes: usize, sink: Option<Arc<Mutex<Vec<String>>>>) -> Self {
        let pending = Pending { mask: 0, op: Collective::Ballot, value: 0, arg: 0 };
        Self {
            threads,
            shared: UnsafeCell::new(vec![u128::MAX; shared_bytes.div_ceil(16)]),
            lanes: (0..threads)
                .map(|_| Lane {
                    status: Cell::new(Status::Runnable),
                    result: Cell::new(0),
                    yielder: Cell::new(std::ptr::null()),
                })
                .collect(),
            live: Cell::new(threads),
            barrier: RefCell::new(BarrierState {
                arrived: 0,
                op: BarrierOp::Plain,
                count: 0,
                result: 0,
                site: Location::caller(),
            }),
            named: (0..crate::thread::NAMED_BARRIERS).map(|_| RefCell::default()).collect(),
            warps: (0..threads.div_ceil(32))
                .map(|_| {
                    RefCell::new(WarpState {
                        arrived: 0,
                        pending: [pending; 32],
                        gather_in: [[0; GATHER_WORDS]; 32],
                        gathered: [[0; GATHER_WORDS]; 32],
                    })
                })
                .collect(),
            sink,
        }
    }

    fn shared_base(&self) -> *mut u8 {
        // SAFETY: only the address is taken; accesses go through the kernel's own contract.
        unsafe { (*self.shared.get()).as_mut_ptr() as *mut u8 }
    }

    /// Before a block: poisoned shared memory, every thread runnable, no barrier under way.
    fn start_block(&self) {
        // SAFETY: no simulated thread of this state runs between blocks.
        unsafe {
            let shared = &mut *self.shared.get();
            shared.fill(u128::MAX);
        }
        for lane in &self.lanes {
            lane.status.set(Status::Runnable);
        }
        self.live.set(self.threads);
        self.barrier.borrow_mut().arrived = 0;
        for round in &self.named {
            *round.borrow_mut() = NamedRound::default();
        }
        for warp in &self.warps {
            warp.borrow_mut().arrived = 0;
        }
    }

    /// The lanes of warp `warp` that exist (the last warp of a block may be partial).
    fn existing_lanes(&self, warp: usize) -> u32 {
        let len = (self.threads - warp * 32).min(32);
        if len == 32 { u32::MAX } else { (1u32 << len) - 1 }
    }

    /// Suspends thread `rank` until another thread releases it; unwinds with [`Abandoned`] if the
    /// launch stops meanwhile.
    fn suspend(&self, rank: usize, wait: Wait) {
        let lane = &self.lanes[rank];
        lane.status.set(match wait {
            Wait::Running => Status::Runnable,
            wait => Status::Waiting(wait),
        });
        // SAFETY: set when the thread's coroutine started; the coroutine is running now.
        let yielder = unsafe { &*lane.yielder.get() };
        if let Resume::Abort = yielder.suspend(()) {
            panic::resume_unwind(Box::new(Abandoned));
        }
    }

    /// Makes every thread waiting for what `which` accepts runnable.
    fn release(&self, which: impl Fn(Wait) -> bool) {
        for lane in &self.lanes {
            if let Status::Waiting(w) = lane.status.get()
                && which(w)
            {
                lane.status.set(Status::Runnable);
            }
        }
    }

    /// Completes barrier 0 if every live thread has arrived: its result for everyone, the waiting
    /// threads runnable. Whether it completed.
    fn complete_barrier(&self) -> bool {
        let mut bar = self.barrier.borrow_mut();
        if bar.arrived == 0 || bar.arrived < self.live.get() {
            return false;
        }
        bar.result = match bar.op {
            BarrierOp::Plain | BarrierOp::Count => bar.count,
            BarrierOp::And => (bar.count as usize == bar.arrived) as u32,
            BarrierOp::Or => (bar.count > 0) as u32,
        };
        bar.arrived = 0;
        drop(bar);
        self.release(|w| matches!(w, Wait::Barrier { .. }));
        true
    }

    /// Completes the collective `op` over `mask` of warp `warp` if every lane of `lanes` (the
    /// mask's lanes that exist) waits at it with that mask: each lane's result, the waiting lanes
    /// runnable. Whether it completed.
    fn complete_collective(&self, warp: usize, lanes: u32, mask: u32, op: Collective) -> bool {
        let mut w = self.warps[warp].borrow_mut();
        let ready = w.arrived & lanes == lanes
            && (0..32)
                .filter(|l| lanes & (1 << l) != 0)
                .all(|l| w.pending[l].mask == mask && w.pending[l].op == op);
        if !ready {
            return false;
        }
        let members = || (0..32usize).filter(move |l| lanes & (1 << l) != 0);
        let base = warp * 32;
        let existing = self.existing_lanes(warp);
        match op {
            Collective::Shuffle(mode) => {
                use crate::warp::Mode;
                for l in members() {
                    let p = w.pending[l];
                    let source = match mode {
                        Mode::Up => (l as u32).checked_sub(p.arg),
                        Mode::Down => (l as u32).checked_add(p.arg).filter(|&s| s < 32),
                        Mode::Xor => Some(l as u32 ^ p.arg).filter(|&s| s < 32),
                        Mode::Idx => Some(p.arg & 31),
                    };
                    let value = match source {
                        // Past the block's last thread: no lane, the own value (as past the warp).
                        Some(s) if existing & (1 << s) == 0 => p.value,
                        Some(s) if lanes & (1 << s) != 0 => w.pending[s as usize].value,
                        Some(s) => {
                            drop(w);
                            panic!(
                                "warp {warp}: lane {l} reads lane {s} in a shuffle over the lanes {mask:#010x}, \
                                 which leaves lane {s} out (undefined on the GPU)"
                            )
                        }
                        None => p.value,
                    };
                    self.lanes[base + l].result.set(value);
                }
            }
            Collective::Ballot => {
                let ballot = members().filter(|&l| w.pending[l].value != 0).fold(0u64, |m, l| m | 1 << l);
                members().for_each(|l| self.lanes[base + l].result.set(ballot));
            }
            Collective::MatchAny => {
                for l in members() {
                    let v = w.pending[l].value;
                    let same = members().filter(|&k| w.pending[k].value == v).fold(0u64, |m, k| m | 1 << k);
                    self.lanes[base + l].result.set(same);
                }
            }
            Collective::MatchAll => {
                let first = w.pending[members().next().unwrap()].value;
                let all = members().all(|l| w.pending[l].value == first);
                members().for_each(|l| self.lanes[base + l].result.set(if all { lanes as u64 } else { 0 }));
            }
            Collective::Reduce(r) => {
                let total = members().map(|l| w.pending[l].value).reduce(|a, b| r.apply(a, b)).unwrap();
                members().for_each(|l| self.lanes[base + l].result.set(total));
            }
            Collective::Gather => w.gathered = w.gather_in,
        }
        w.arrived &= !lanes;
        drop(w);
        for l in members() {
            if let Status::Waiting(Wait::Collective { .. }) = self.lanes[base + l].status.get() {
                self.lanes[base + l].status.set(Status::Runnable);
            }
        }
        true
    }

    /// Thread `rank` returned (or failed): it no longer takes part in barrier 0.
    fn exited(&self, rank: usize) {
        self.lanes[rank].status.set(Status::Done);
        self.live.set(self.live.get() - 1);
        self.complete_barrier();
    }

    /// With no thread runnable: the lanes waiting at `activemask` get the lanes of their warp that
    /// wait at the same call, and go on. Whether any did.
    fn resolve_active_masks(&self) -> bool {
        let mut any = false;
        for warp in 0..self.warps.len() {
            let base = warp * 32;
            let len = (self.threads - base).min(32);
            for l in 0..len {
                let Status::Waiting(Wait::ActiveMask { site }) = self.lanes[base + l].status.get() else {
                    continue;
                };
                let mask = (0..len)
                    .filter(|&k| {
                        matches!(self.lanes[base + k].status.get(),
                            Status::Waiting(Wait::ActiveMask { site: s }) if std::ptr::eq(s, site))
                    })
                    .fold(0u64, |m, k| m | 1 << k);
                for k in (0..len).filter(|&k| mask & (1 << k) != 0) {
                    self.lanes[base + k].result.set(mask);
                    self.lanes[base + k].status.set(Status::Runnable);
                }
                any = true;
            }
        }
        any
    }

    /// Why no thread can go on: per warp, which lanes wait where and which have returned.
    fn deadlock_report(&self) -> String {
        let mut report = String::from("no thread of the block can go on (on the GPU: a hang)");
        let mut warps_shown = 0;
        for warp in 0..self.warps.len() {
            let base = warp * 32;
            let len = (self.threads - base).min(32);
            let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
            for l in 0..len {
                let what = match self.lanes[base + l].status.get() {
                    Status::Waiting(w) => w.to_string(),
                    Status::Done => "returned".to_string(),
                    Status::Runnable => "running".to_string(),
                };
                match groups.iter_mut().find(|(w, _)| *w == what) {
                    Some((_, lanes)) => lanes.push(l as u32),
                    None => groups.push((what, vec![l as u32])),
                }
            }
            if groups.len() == 1 && groups[0].0 == "returned" {
                continue;
            }
            warps_shown += 1;
            if warps_shown > 8 {
                report.push_str("\n  …");
                break;
            }
            let _ = write!(report, "\n  warp {warp}:");
            for (i, (what, lanes)) in groups.iter().enumerate() {
                let sep = if i == 0 { " " } else { "; " };
                let _ = write!(report, "{sep}lanes {} {what}", lane_list(lanes));
            }
        }
        report
    }
}

/// The first failure of a launch, and how many threads failed.
#[derive(Default)]
struct Failures {
    first: Option<Failure>,
    threads: u64,
    blocks: u64,
}

struct Failure {
    block: Dim3,
    thread: Option<Dim3>,
    location: Option<String>,
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

/// Replaces the process's panic hook once by one that keeps quiet for simulated threads (the
/// launch reports their first panic itself, once) and records where they panicked.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CURRENT.with(Cell::get).is_some() {
                let location = info.location().map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
                PANIC_LOCATION.with(|p| *p.borrow_mut() = location);
            } else {
                previous(info)
            }
        }));
    });
}

/// Shared pointer-carrying arguments across the simulator's threads.
struct SyncArgs<A>(A);
// SAFETY: the arguments are device-style pointers and scalars; as on the GPU, which thread touches
// which element is the kernel's contract.
unsafe impl<A> Sync for SyncArgs<A> {}
// SAFETY: as above.
unsafe impl<A> Send for SyncArgs<A> {}

/// Stack of each simulated thread: kernels compiled without optimisation (test crates) need more
/// than the 8 KiB a GPU thread would have.
const STACK_BYTES: usize = 1 << 20;

/// Runs `kernel` with `args` over the launch `cfg` on the CPU and returns when every block has
/// finished.
///
/// # Panics
/// Re-raises the first panic of the kernel as `kernel `name` panicked in block (x, y, z), thread
/// (x, y, z) at file:line:column: message`, followed by how many other threads failed; and a block
/// in which no thread can go on as `kernel `name` cannot go on in block (x, y, z): …`, with who
/// waits where.
///
/// # Safety
/// The pointer arguments must be valid for every access the kernel makes, as for a GPU launch.
pub unsafe fn launch<A: Copy>(kernel: &KernelFn<A>, cfg: LaunchConfig, args: A) -> Result<(), SimError> {
    cfg.validate()?;
    install_panic_hook();
    let threads = cfg.block.volume() as usize;
    let blocks = cfg.grid.volume();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let groups = cores.min(blocks).max(1) as usize;
    let args = SyncArgs(args);
    let next_block = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failures: Mutex<Failures> = Mutex::new(Failures::default());
    let sink = CAPTURE.with(|c| c.borrow().clone());

    std::thread::scope(|scope| {
        for _ in 0..groups {
            let (args, next_block, stop, failures, sink) = (&args, &next_block, &stop, &failures, &sink);
            std::thread::Builder::new()
                .spawn_scoped(scope, move || {
                    let state = BlockState::new(threads, cfg.shared_bytes as usize, sink.clone());
                    let mut stacks: Vec<DefaultStack> = Vec::new();
                    loop {
                        let b = next_block.fetch_add(1, Ordering::SeqCst);
                        if b >= blocks || stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let block_idx = cfg.grid.unflatten(b);
                        let outcome = run_block(kernel, cfg, args, &state, &mut stacks, block_idx);
                        if outcome.failed_threads > 0 || outcome.first.is_some() {
                            stop.store(true, Ordering::SeqCst);
                            let mut f = failures.lock().unwrap_or_else(|e| e.into_inner());
                            f.threads += outcome.failed_threads;
                            f.blocks += 1;
                            if f.first.is_none() {
                                f.first = outcome.first;
                            }
                        }
                    }
                })
                .expect("the simulator could not start an OS thread");
        }
    });

    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = failures.first {
        let name = kernel.name();
        let mut message = match f.thread {
            Some(thread) => format!("kernel `{name}` panicked in block {}, thread {thread}", f.block),
            None => format!("kernel `{name}` cannot go on in block {}", f.block),
        };
        if let Some(location) = f.location {
            let _ = write!(message, " at {location}");
        }
        let _ = write!(message, ": {}", f.message);
        let others = failures.threads.saturating_sub(1);
        if others > 0 {
            let _ = write!(
                message,
                "\n({others} more thread{} failed, in {} block{} in all)",
                if others == 1 { "" } else { "s" },
                failures.blocks,
                if failures.blocks == 1 { "" } else { "s" }
            );
        }
        panic!("{message}");
    }
    Ok(())
}

/// How one block ended.
struct BlockOutcome {
    failed_threads: u64,
    first: Option<Failure>,
}

/// Runs block `block_idx` to its end on this OS thread, its threads as coroutines on `stacks`.
fn run_block<A: Copy>(
    kernel: &KernelFn<A>,
    cfg: LaunchConfig,
    args: &SyncArgs<A>,
    state: &BlockState,
    stacks: &mut Vec<DefaultStack>,
    block_idx: Dim3,
) -> BlockOutcome {
    state.start_block();
    let failures: RefCell<BlockOutcome> = RefCell::new(BlockOutcome { failed_threads: 0, first: None });
    let thread_state = |rank: usize| ThreadState {
        thread_idx: cfg.block.unflatten(rank as u64),
        block_idx,
        block_dim: cfg.block,
        grid_dim: cfg.grid,
        shared_bytes: cfg.shared_bytes as usize,
        rank,
        block: state,
    };
    let failures_ref = &failures;
    // SAFETY (of `with_stack_unchecked`): what the coroutines borrow (the kernel, its arguments,
    // the block's state, `failures`) outlives them: each runs to its end below (or is stopped with
    // `Resume::Abort`, which also ends it), and all are turned back into stacks before returning.
    let mut coroutines: Vec<Coroutine<Resume, (), (), DefaultStack>> = (0..state.threads)
        .map(|rank| {
            let stack = stacks.pop().unwrap_or_else(|| {
                DefaultStack::new(STACK_BYTES).expect("the simulator could not allocate a thread's stack")
            });
            let body = move |yielder: &Yielder<Resume, ()>, resume: Resume| {
                state.lanes[rank].yielder.set(yielder);
                let result = match resume {
                    Resume::Go => panic::catch_unwind(AssertUnwindSafe(|| kernel.run_on_host(args.0))),
                    Resume::Abort => Err(Box::new(Abandoned) as Box<dyn Any + Send>),
                };
                state.exited(rank);
                if let Err(payload) = result
                    && !payload.is::<Abandoned>()
                {
                    let mut f = failures_ref.borrow_mut();
                    f.failed_threads += 1;
                    if f.first.is_none() {
                        f.first = Some(Failure {
                            block: block_idx,
                            thread: Some(cfg.block.unflatten(rank as u64)),
                            location: PANIC_LOCATION.with(|p| p.borrow_mut().take()),
                            message: panic_message(&*payload),
                        });
                    }
                }
            };
            unsafe { Coroutine::with_stack_unchecked(stack, body) }
        })
        .collect();

    let resume = |rank: usize, how: Resume, co: &mut Coroutine<Resume, (), (), DefaultStack>| {
        CURRENT.with(|c| c.set(Some(thread_state(rank))));
        co.resume(how);
        CURRENT.with(|c| c.set(None));
    };
    loop {
        let mut ran = false;
        for (rank, co) in coroutines.iter_mut().enumerate() {
            if let Status::Runnable = state.lanes[rank].status.get() {
                resume(rank, Resume::Go, co);
                ran = true;
            }
        }
        if state.lanes.iter().all(|l| matches!(l.status.get(), Status::Done)) {
            break;
        }
        if ran || state.resolve_active_masks() {
            continue;
        }
        let report = state.deadlock_report();
        failures.borrow_mut().first.get_or_insert(Failure {
            block: block_idx,
            thread: None,
            location: None,
            message: report,
        });
        for (rank, co) in coroutines.iter_mut().enumerate() {
            if !matches!(state.lanes[rank].status.get(), Status::Done) {
                resume(rank, Resume::Abort, co);
            }
        }
        break;
    }
    stacks.extend(coroutines.into_iter().map(Coroutine::into_stack));
    failures.into_inner()
}
