//! The block scheduler: every simulated thread of a block a coroutine, run in turn until it waits
//! at a barrier or a collective; what each waits for, and the report when none can go on.

use super::*;

/// What a suspended simulated thread waits for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Wait {
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
pub(super) enum Status {
    Runnable,
    Waiting(Wait),
    Done,
}

/// What the scheduler passes a simulated thread it resumes.
#[derive(Clone, Copy)]
pub(super) enum Resume {
    Go,
    /// The launch stopped: unwind (with [`Abandoned`]).
    Abort,
}

/// Unwind payload of a thread stopped because its block cannot go on.
pub(super) struct Abandoned;

/// Per simulated thread.
pub(super) struct Lane {
    pub(super) status: Cell<Status>,
    /// What its last collective or barrier gave it.
    pub(super) result: Cell<u64>,
    pub(super) yielder: Cell<*const Yielder<Resume, ()>>,
}

#[derive(Clone, Copy)]
pub(super) struct Pending {
    pub(super) mask: u32,
    pub(super) op: Collective,
    pub(super) value: u64,
    pub(super) arg: u32,
}

pub(super) struct WarpState {
    /// Lanes waiting at a collective.
    pub(super) arrived: u32,
    pub(super) pending: [Pending; 32],
    pub(super) gather_in: [[u64; GATHER_WORDS]; 32],
    pub(super) gathered: [[u64; GATHER_WORDS]; 32],
}

pub(super) struct BarrierState {
    pub(super) arrived: usize,
    pub(super) op: BarrierOp,
    pub(super) count: u32,
    pub(super) result: u32,
    pub(super) site: &'static Location<'static>,
    /// Whether a thread arrived through [`shared::sync_threads`](crate::shared::sync_threads),
    /// which needs every thread at the same call.
    pub(super) one_site: bool,
    /// Barrier-0 rounds completed in this block: the shared-memory race check's epoch.
    pub(super) rounds: u32,
}

/// What the race check knows of one byte of shared memory in the current barrier round: the
/// thread that wrote it, read it, or used it atomically through the safe shared-memory types
/// ([`NOBODY`] or [`SEVERAL`] otherwise). Entries of an earlier round or block count as empty.
#[derive(Clone, Copy)]
pub(super) struct ShadowByte {
    pub(super) block: u32,
    pub(super) round: u32,
    pub(super) writer: u16,
    pub(super) reader: u16,
    pub(super) atomic: u16,
}

/// No thread (in a [`ShadowByte`]).
pub(super) const NOBODY: u16 = u16::MAX;
/// More than one thread (in a [`ShadowByte`]).
pub(super) const SEVERAL: u16 = u16::MAX - 1;

#[derive(Default)]
pub(super) struct NamedRound {
    pub(super) expected: u32,
    pub(super) arrived: u32,
}

/// The block an OS thread runs: its simulated threads' states, barriers and shared memory. Only
/// that OS thread touches it while the block runs.
pub(super) struct BlockState {
    pub(super) threads: usize,
    pub(super) shared: UnsafeCell<Vec<u128>>,
    /// The race check's record, one entry per byte of `shared`.
    pub(super) shadow: RefCell<Vec<ShadowByte>>,
    /// Blocks run by this state so far: tells the shadow's entries of earlier blocks apart.
    pub(super) generation: Cell<u32>,
    pub(super) lanes: Vec<Lane>,
    pub(super) live: Cell<usize>,
    pub(super) barrier: RefCell<BarrierState>,
    pub(super) named: Vec<RefCell<NamedRound>>,
    pub(super) warps: Vec<RefCell<WarpState>>,
    pub(super) sink: Option<Arc<Mutex<Vec<String>>>>,
}

impl BlockState {
    pub(super) fn new(threads: usize, shared_bytes: usize, sink: Option<Arc<Mutex<Vec<String>>>>) -> Self {
        let pending = Pending { mask: 0, op: Collective::Ballot, value: 0, arg: 0 };
        Self {
            threads,
            shared: UnsafeCell::new(vec![u128::MAX; shared_bytes.div_ceil(16)]),
            shadow: RefCell::new(vec![
                ShadowByte {
                    block: 0,
                    round: 0,
                    writer: NOBODY,
                    reader: NOBODY,
                    atomic: NOBODY
                };
                shared_bytes
            ]),
            generation: Cell::new(0),
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
                one_site: false,
                rounds: 0,
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

    pub(super) fn shared_base(&self) -> *mut u8 {
        // SAFETY: only the address is taken; accesses go through the kernel's own contract.
        unsafe { (*self.shared.get()).as_mut_ptr() as *mut u8 }
    }

    /// Before a block: poisoned shared memory, every thread runnable, no barrier under way.
    pub(super) fn start_block(&self) {
        // SAFETY: no simulated thread of this state runs between blocks.
        unsafe {
            let shared = &mut *self.shared.get();
            shared.fill(u128::MAX);
        }
        for lane in &self.lanes {
            lane.status.set(Status::Runnable);
        }
        self.live.set(self.threads);
        self.generation.set(self.generation.get() + 1);
        {
            let mut bar = self.barrier.borrow_mut();
            bar.arrived = 0;
            bar.rounds = 0;
        }
        for round in &self.named {
            *round.borrow_mut() = NamedRound::default();
        }
        for warp in &self.warps {
            warp.borrow_mut().arrived = 0;
        }
    }

    /// The lanes of warp `warp` that exist (the last warp of a block may be partial).
    pub(super) fn existing_lanes(&self, warp: usize) -> u32 {
        let len = (self.threads - warp * 32).min(32);
        if len == 32 { u32::MAX } else { (1u32 << len) - 1 }
    }

    /// Suspends thread `rank` until another thread releases it; unwinds with [`Abandoned`] if the
    /// launch stops meanwhile.
    pub(super) fn suspend(&self, rank: usize, wait: Wait) {
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
    pub(super) fn release(&self, which: impl Fn(Wait) -> bool) {
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
    pub(super) fn complete_barrier(&self) -> bool {
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
        bar.rounds = bar.rounds.wrapping_add(1);
        drop(bar);
        self.release(|w| matches!(w, Wait::Barrier { .. }));
        true
    }

    /// Completes the collective `op` over `mask` of warp `warp` if every lane of `lanes` (the
    /// mask's lanes that exist) waits at it with that mask: each lane's result, the waiting lanes
    /// runnable. Whether it completed.
    pub(super) fn complete_collective(&self, warp: usize, lanes: u32, mask: u32, op: Collective) -> bool {
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
    pub(super) fn exited(&self, rank: usize) {
        self.lanes[rank].status.set(Status::Done);
        self.live.set(self.live.get() - 1);
        self.complete_barrier();
    }

    /// With no thread runnable: the lanes waiting at `activemask` get the lanes of their warp that
    /// wait at the same call, and go on. Whether any did.
    pub(super) fn resolve_active_masks(&self) -> bool {
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
    pub(super) fn deadlock_report(&self) -> String {
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
