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
//!   first failing block and thread, the kernel's source line, and how many other threads failed
//!   (the host's `Device::launch` returns that report as an error, as it returns a GPU's trap).
//! * [`printf!`](crate::printf) writes one line per call, prefixed with the block and thread;
//!   [`capture_output`] collects those lines instead, for tests.
//!
//! It is for correctness, not speed; it differs from the GPU in arithmetic overflow (debug test
//! builds check it, the GPU's release code wraps) and in timing (no clock, no concurrency between
//! the threads of a block except at the points above).
//!
//! This file holds the launch (blocks handed to OS threads, failures reported once); `device.rs`
//! what the device library calls (thread state, barriers, shared memory, warp collectives,
//! `printf!`), `scheduler.rs` the block's coroutines and what each waits for.

use crate::kernel_fn::KernelFn;
use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, Yielder};
use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::fmt::{self, Write as _};
use std::panic::{self, AssertUnwindSafe, Location};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

mod device;
mod scheduler;

pub use device::capture_output;
pub(crate) use device::*;
use scheduler::*;

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
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    // SAFETY: forwarded from the caller.
    unsafe { launch_on_threads(kernel, cfg, args, cores.min(cfg.grid.volume()).max(1) as usize) }
}

/// Most blocks of a [`launch_cooperative`]: each is an OS thread.
pub const MAX_COOPERATIVE_BLOCKS: u64 = 256;

/// [`launch`] with every block running at once, each on an OS thread of its own, as CUDA's
/// cooperative launch guarantees on a GPU: kernels whose blocks wait for each other
/// ([`GridBarrier`](crate::grid::GridBarrier)) need it. A block that fails stops the others at
/// their next grid barrier.
///
/// # Panics
/// As [`launch`].
///
/// # Safety
/// As for [`launch`].
pub unsafe fn launch_cooperative<A: Copy>(
    kernel: &KernelFn<A>,
    cfg: LaunchConfig,
    args: A,
) -> Result<(), SimError> {
    cfg.validate()?;
    let blocks = cfg.grid.volume();
    if blocks > MAX_COOPERATIVE_BLOCKS {
        return Err(SimError(format!(
            "a cooperative launch of {blocks} blocks: the simulator runs at most {MAX_COOPERATIVE_BLOCKS} at once"
        )));
    }
    // SAFETY: forwarded from the caller.
    unsafe { launch_on_threads(kernel, cfg, args, blocks as usize) }
}

thread_local! {
    /// The running launch's stop flag, set when a block fails: blocks waiting at a grid barrier
    /// then give up instead of waiting for a block that will never arrive.
    static LAUNCH_STOP: Cell<*const AtomicBool> = const { Cell::new(std::ptr::null()) };
}

/// Whether another block of this launch has failed (grid barriers stop waiting then).
pub(crate) fn launch_stopped() -> bool {
    let stop = LAUNCH_STOP.with(Cell::get);
    // SAFETY: set by `launch_on_threads` for the OS threads it runs, to a flag that outlives them.
    !stop.is_null() && unsafe { (*stop).load(Ordering::SeqCst) }
}

/// Runs the launch's blocks, handed out in order, on `groups` OS threads.
///
/// # Safety
/// As for [`launch`].
unsafe fn launch_on_threads<A: Copy>(
    kernel: &KernelFn<A>,
    cfg: LaunchConfig,
    args: A,
    groups: usize,
) -> Result<(), SimError> {
    install_panic_hook();
    let threads = cfg.block.volume() as usize;
    let blocks = cfg.grid.volume();
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
                    LAUNCH_STOP.with(|s| s.set(stop));
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
