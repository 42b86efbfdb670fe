//! What the device library calls in the simulator: the current simulated thread's state, barriers,
//! shared memory, warp collectives, `printf!` output.

use super::*;
use crate::shared::Access;

/// What the device library reads about the current simulated thread.
#[derive(Clone, Copy)]
pub(crate) struct ThreadState {
    pub thread_idx: Dim3,
    pub block_idx: Dim3,
    pub block_dim: Dim3,
    pub grid_dim: Dim3,
    pub shared_bytes: usize,
    pub(super) rank: usize,
    pub(super) block: *const BlockState,
}

thread_local! {
    pub(super) static CURRENT: Cell<Option<ThreadState>> = const { Cell::new(None) };
    /// Where the last panic of a simulated thread on this OS thread happened (set by the hook).
    pub(super) static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The lines [`capture_output`] collects for launches made on this OS thread.
    pub(super) static CAPTURE: RefCell<Option<Arc<Mutex<Vec<String>>>>> = const { RefCell::new(None) };
}

/// Runs `f` on the current simulated thread's state.
pub(crate) fn with_thread<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    match CURRENT.with(Cell::get) {
        Some(state) => f(&state),
        None => panic!("a device function was called outside a kernel launch (use the simulator)"),
    }
}

pub(super) fn with_block<R>(f: impl FnOnce(&ThreadState, &BlockState) -> R) -> R {
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
    barrier(op, predicate, false)
}

/// The barrier of [`shared::sync_threads`](crate::shared::sync_threads): a plain one that every
/// thread of the block must reach at the same call (the same source location), since it moves
/// tiles from one phase to the next in every thread at once.
#[track_caller]
pub(crate) fn tile_barrier() {
    barrier(BarrierOp::Plain, false, true);
}

#[track_caller]
fn barrier(op: BarrierOp, predicate: bool, one_site: bool) -> u32 {
    let site = Location::caller();
    let arrived = with_block(|_, b| {
        let mut bar = b.barrier.borrow_mut();
        if bar.arrived > 0 && bar.op != op {
            return Err(format!(
                "a {op:?} block barrier at {site} meets a {:?} one at {}: every thread of a block must reach \
                 the same kind of barrier",
                bar.op, bar.site
            ));
        }
        if bar.arrived > 0 && (bar.one_site || one_site) && bar.site != site {
            return Err(format!(
                "the block's threads meet at different barriers, {} and {site}, one of them \
                 shared::sync_threads: its tiles change phase in every thread at once, so every thread of \
                 the block must reach the same call (divergent barriers are undefined on the GPU)",
                bar.site
            ));
        }
        if bar.arrived == 0 {
            bar.op = op;
            bar.site = site;
            bar.count = 0;
            bar.one_site = false;
        }
        bar.one_site |= one_site;
        bar.arrived += 1;
        bar.count += predicate as u32;
        Ok(())
    });
    if let Err(message) = arrived {
        panic!("{message}");
    }
    with_block(|t, b| {
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

/// The race check of the safe shared-memory types: records that this thread accesses the `bytes`
/// bytes at `ptr` (in the block's shared memory) and panics if another thread accessed one of them
/// since the last barrier in a way that conflicts (a write with anything, a plain access with an
/// atomic one), naming both threads. Tiles that alias (two allocators, allocations that differ
/// between threads), phases that diverge and ownership broken any other way all end here.
#[track_caller]
pub(crate) fn shared_access(ptr: *const u8, bytes: usize, access: Access) {
    let conflict = with_block(|t, b| {
        let start = (ptr as usize).wrapping_sub(b.shared_base() as usize);
        let mut shadow = b.shadow.borrow_mut();
        let entries = shadow.get_mut(start..start.checked_add(bytes)?)?;
        let (block, round) = (b.generation.get(), b.barrier.borrow().rounds);
        let me = t.rank as u16;
        for (i, e) in entries.iter_mut().enumerate() {
            if e.block != block || e.round != round {
                *e = ShadowByte { block, round, writer: NOBODY, reader: NOBODY, atomic: NOBODY };
            }
            let other = |who: u16| who != NOBODY && who != me;
            let (what, who) = match access {
                Access::Read if other(e.writer) => ("reads", ("wrote", e.writer)),
                Access::Read if other(e.atomic) => ("reads", ("updated atomically", e.atomic)),
                Access::Write if other(e.writer) => ("writes", ("wrote", e.writer)),
                Access::Write if other(e.reader) => ("writes", ("read", e.reader)),
                Access::Write if other(e.atomic) => ("writes", ("updated atomically", e.atomic)),
                Access::Atomic if other(e.writer) => ("updates atomically", ("wrote", e.writer)),
                Access::Atomic if other(e.reader) => ("updates atomically", ("read", e.reader)),
                _ => {
                    let slot = match access {
                        Access::Read => &mut e.reader,
                        Access::Write => &mut e.writer,
                        Access::Atomic => &mut e.atomic,
                    };
                    *slot = if *slot == NOBODY || *slot == me { me } else { SEVERAL };
                    continue;
                }
            };
            let (did, by) = who;
            let by = match by {
                SEVERAL => "other threads".to_string(),
                rank => format!("thread {}", t.block_dim.unflatten(rank as u64)),
            };
            return Some(format!(
                "shared-memory race: this thread {what} byte {} of the block's shared memory, which {by} \
                 {did} since the last barrier",
                start + i
            ));
        }
        None
    });
    if let Some(message) = conflict {
        panic!("{message}");
    }
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
    pub(super) fn apply(self, a: u64, b: u64) -> u64 {
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
pub(super) const GATHER_WORDS: usize = 4;

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
pub(super) fn lane_list(lanes: &[u32]) -> String {
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
