//! Warp collectives: the 32 lanes of a warp exchanging registers, voting and reducing without
//! shared memory.
//!
//! The `_sync` functions take CUDA's `mask`: the lanes that take part, the calling lane among
//! them; each of them must make the same call with the same mask ([`FULL_MASK`] for the whole
//! warp, [`activemask`] for the lanes that got here together). In the simulator a lane outside
//! the mask that a shuffle reads, a lane of the mask that has returned, and lanes that never come
//! are reported instead of giving the GPU's undefined result or hang.
//!
//! [`reduce`], [`inclusive_scan`] and [`exclusive_scan`] combine any [`Shuffle`] type with any
//! associative operation over the whole warp (every lane of it exists and calls them).

/// Threads per warp.
pub const WARP_SIZE: u32 = 32;

/// Mask naming all 32 lanes.
pub const FULL_MASK: u32 = 0xffff_ffff;

/// This thread's lane within its warp, `0..32`.
#[inline(always)]
pub fn lane_id() -> u32 {
    crate::thread::thread_rank_in_block() % WARP_SIZE
}

/// This thread's warp within its block, `0..ceil(threads / 32)`.
#[inline(always)]
pub fn warp_id() -> u32 {
    crate::thread::thread_rank_in_block() / WARP_SIZE
}

/// A value that can travel through a shuffle (and be matched): up to 64 bits; 64-bit values take
/// two shuffles.
pub trait Shuffle: Copy {
    #[doc(hidden)]
    fn to_bits(self) -> u64;
    #[doc(hidden)]
    fn from_bits(bits: u64) -> Self;
    #[doc(hidden)]
    const WIDE: bool;
}

macro_rules! shuffle_float {
    ($t:ty, $bits:ty, $wide:expr) => {
        impl Shuffle for $t {
            #[inline(always)]
            fn to_bits(self) -> u64 {
                self.to_bits() as u64
            }
            #[inline(always)]
            fn from_bits(bits: u64) -> Self {
                <$t>::from_bits(bits as $bits)
            }
            const WIDE: bool = $wide;
        }
    };
}
shuffle_float!(f32, u32, false);
shuffle_float!(f64, u64, true);

macro_rules! shuffle_int {
    ($($t:ty => $wide:expr),*) => {$(
        impl Shuffle for $t {
            #[inline(always)]
            fn to_bits(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            fn from_bits(bits: u64) -> Self {
                bits as $t
            }
            const WIDE: bool = $wide;
        }
    )*};
}
shuffle_int!(u8 => false, i8 => false, u16 => false, i16 => false, u32 => false, i32 => false,
    u64 => true, i64 => true, usize => true, isize => true);

impl Shuffle for bool {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        bits != 0
    }
    const WIDE: bool = false;
}

/// The four shuffle modes of `shfl.sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub enum Mode {
    /// Read from lane `lane - delta` (own value below lane `delta`).
    Up,
    /// Read from lane `lane + delta` (own value if that is past the warp).
    Down,
    /// Read from lane `lane ^ mask`.
    Xor,
    /// Read from lane `src`.
    Idx,
}

#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn shfl_b32(mode: Mode, mask: u32, value: u32, lane_arg: u32) -> u32 {
    let out: u32;
    // SAFETY: register exchange within the warp; `mask` names the participating lanes.
    unsafe {
        match mode {
            Mode::Up => core::arch::asm!("shfl.sync.up.b32 {}, {}, {}, 0x0, {};",
                out(reg32) out, in(reg32) value, in(reg32) lane_arg, in(reg32) mask),
            Mode::Down => core::arch::asm!("shfl.sync.down.b32 {}, {}, {}, 0x1f, {};",
                out(reg32) out, in(reg32) value, in(reg32) lane_arg, in(reg32) mask),
            Mode::Xor => core::arch::asm!("shfl.sync.bfly.b32 {}, {}, {}, 0x1f, {};",
                out(reg32) out, in(reg32) value, in(reg32) lane_arg, in(reg32) mask),
            Mode::Idx => core::arch::asm!("shfl.sync.idx.b32 {}, {}, {}, 0x1f, {};",
                out(reg32) out, in(reg32) value, in(reg32) lane_arg, in(reg32) mask),
        }
    }
    out
}

#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
fn shuffle<T: Shuffle>(mode: Mode, mask: u32, value: T, lane_arg: u32) -> T {
    #[cfg(target_arch = "nvptx64")]
    {
        let bits = value.to_bits();
        let lo = shfl_b32(mode, mask, bits as u32, lane_arg) as u64;
        let hi = if T::WIDE { shfl_b32(mode, mask, (bits >> 32) as u32, lane_arg) as u64 } else { 0 };
        T::from_bits(lo | (hi << 32))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    T::from_bits(crate::sim::warp_collective(
        mask,
        crate::sim::Collective::Shuffle(mode),
        value.to_bits(),
        lane_arg,
    ))
}

/// `__shfl_up_sync`: the value of lane `lane_id() - delta`, or this lane's own value below lane
/// `delta`. The building block of warp scans.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn shfl_up_sync<T: Shuffle>(mask: u32, value: T, delta: u32) -> T {
    shuffle(Mode::Up, mask, value, delta)
}

/// `__shfl_down_sync`: the value of lane `lane_id() + delta`, or this lane's own value when that
/// lane is past the end of the warp. The building block of warp reductions.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn shfl_down_sync<T: Shuffle>(mask: u32, value: T, delta: u32) -> T {
    shuffle(Mode::Down, mask, value, delta)
}

/// `__shfl_xor_sync`: the value of lane `lane_id() ^ lane_mask` (butterfly exchange).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn shfl_xor_sync<T: Shuffle>(mask: u32, value: T, lane_mask: u32) -> T {
    shuffle(Mode::Xor, mask, value, lane_mask)
}

/// `__shfl_sync`: the value of lane `src_lane` (a broadcast when all lanes pass the same lane).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn shfl_sync<T: Shuffle>(mask: u32, value: T, src_lane: u32) -> T {
    shuffle(Mode::Idx, mask, value, src_lane)
}

/// `__ballot_sync`: the lanes of `mask` whose `predicate` holds, as a bit mask (bit `l` = lane `l`).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn ballot_sync(mask: u32, predicate: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: a warp vote; `mask` names the participating lanes.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {pred}, 0; vote.sync.ballot.b32 {out}, p, {mask}; }}",
                pred = in(reg32) predicate as u32, mask = in(reg32) mask, out = out(reg32) out
            )
        };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (crate::sim::warp_collective(mask, crate::sim::Collective::Ballot, predicate as u64, 0) as u32)
}

/// `__any_sync`: whether `predicate` holds on any lane of `mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn any_sync(mask: u32, predicate: bool) -> bool {
    ballot_sync(mask, predicate) != 0
}

/// `__all_sync`: whether `predicate` holds on every lane of `mask` (that exists: the last warp of a
/// block may be partial).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn all_sync(mask: u32, predicate: bool) -> bool {
    ballot_sync(mask, !predicate) == 0
}

/// `__match_any_sync`: the lanes of `mask` whose `value` has the same bits as this lane's.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn match_any_sync<T: Shuffle>(mask: u32, value: T) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: a warp match; `mask` names the participating lanes.
        unsafe {
            if T::WIDE {
                core::arch::asm!("match.any.sync.b64 {}, {}, {};",
                    out(reg32) out, in(reg64) value.to_bits(), in(reg32) mask)
            } else {
                core::arch::asm!("match.any.sync.b32 {}, {}, {};",
                    out(reg32) out, in(reg32) value.to_bits() as u32, in(reg32) mask)
            }
        };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (crate::sim::warp_collective(mask, crate::sim::Collective::MatchAny, value.to_bits(), 0) as u32)
}

/// `__match_all_sync`: `Some(mask)` if every lane of `mask` has the same bits in `value`, else
/// `None`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn match_all_sync<T: Shuffle>(mask: u32, value: T) -> Option<u32> {
    #[cfg(target_arch = "nvptx64")]
    let all = {
        let out: u32;
        // SAFETY: a warp match; `mask` names the participating lanes.
        unsafe {
            if T::WIDE {
                core::arch::asm!("match.all.sync.b64 {}, {}, {};",
                    out(reg32) out, in(reg64) value.to_bits(), in(reg32) mask)
            } else {
                core::arch::asm!("match.all.sync.b32 {}, {}, {};",
                    out(reg32) out, in(reg32) value.to_bits() as u32, in(reg32) mask)
            }
        };
        out
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let all = crate::sim::warp_collective(mask, crate::sim::Collective::MatchAll, value.to_bits(), 0) as u32;
    (all != 0).then_some(all)
}

/// `__activemask`: the lanes of this warp executing this call together with this one (in the
/// simulator: those that wait at the same call once no thread of the block can run on).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn activemask() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let out: u32;
        // SAFETY: reads which lanes are active.
        unsafe { core::arch::asm!("activemask.b32 {};", out(reg32) out) };
        out
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::active_mask()
}

/// `__syncwarp`: waits until every lane of `mask` has reached it, and orders their memory
/// accesses (before it, after it) as a barrier does.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn sync_warp(mask: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a warp barrier; `mask` names the participating lanes.
    unsafe {
        core::arch::asm!("bar.warp.sync {};", in(reg32) mask)
    };
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::warp_collective(mask, crate::sim::Collective::Ballot, 0, 0);
}

/// A 32-bit integer that `redux.sync` reduces: `u32` and `i32` (min and max compare as the type).
pub trait Redux: Copy {
    #[doc(hidden)]
    fn redux(self, mask: u32, op: ReduxOp) -> Self;
}

/// The operation of a `redux.sync`.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduxOp {
    Add,
    Min,
    Max,
    And,
    Or,
    Xor,
}

macro_rules! redux_type {
    ($t:ty, $signed:literal, $min:ident, $max:ident) => {
        impl Redux for $t {
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            fn redux(self, mask: u32, op: ReduxOp) -> Self {
                #[cfg(target_arch = "nvptx64")]
                {
                    let a = self as u32;
                    let out: u32;
                    // SAFETY: a warp reduction; `mask` names the participating lanes.
                    unsafe {
                        match op {
                            ReduxOp::Add => core::arch::asm!("redux.sync.add.u32 {}, {}, {};",
                                out(reg32) out, in(reg32) a, in(reg32) mask),
                            ReduxOp::Min => core::arch::asm!(concat!("redux.sync.min.", $signed, "32 {}, {}, {};"),
                                out(reg32) out, in(reg32) a, in(reg32) mask),
                            ReduxOp::Max => core::arch::asm!(concat!("redux.sync.max.", $signed, "32 {}, {}, {};"),
                                out(reg32) out, in(reg32) a, in(reg32) mask),
                            ReduxOp::And => core::arch::asm!("redux.sync.and.b32 {}, {}, {};",
                                out(reg32) out, in(reg32) a, in(reg32) mask),
                            ReduxOp::Or => core::arch::asm!("redux.sync.or.b32 {}, {}, {};",
                                out(reg32) out, in(reg32) a, in(reg32) mask),
                            ReduxOp::Xor => core::arch::asm!("redux.sync.xor.b32 {}, {}, {};",
                                out(reg32) out, in(reg32) a, in(reg32) mask),
                        }
                    }
                    out as $t
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    use crate::sim::Reduction;
                    let reduction = match op {
                        ReduxOp::Add => Reduction::Add,
                        ReduxOp::Min => Reduction::$min,
                        ReduxOp::Max => Reduction::$max,
                        ReduxOp::And => Reduction::And,
                        ReduxOp::Or => Reduction::Or,
                        ReduxOp::Xor => Reduction::Xor,
                    };
                    let bits = self as u32 as u64;
                    crate::sim::warp_collective(mask, crate::sim::Collective::Reduce(reduction), bits, 0) as u32 as $t
                }
            }
        }
    };
}
redux_type!(u32, "u", MinU32, MaxU32);
redux_type!(i32, "s", MinI32, MaxI32);

/// `__reduce_add_sync` (`redux.sync`, sm_80): the wrapping sum of `value` over the lanes of
/// `mask`, for every one of them. One instruction; [`reduce`] does other types.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce_add_sync<T: Redux>(mask: u32, value: T) -> T {
    value.redux(mask, ReduxOp::Add)
}

/// `__reduce_min_sync`: the smallest `value` over the lanes of `mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce_min_sync<T: Redux>(mask: u32, value: T) -> T {
    value.redux(mask, ReduxOp::Min)
}

/// `__reduce_max_sync`: the largest `value` over the lanes of `mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce_max_sync<T: Redux>(mask: u32, value: T) -> T {
    value.redux(mask, ReduxOp::Max)
}

/// `__reduce_and_sync`: the bitwise and of `value` over the lanes of `mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce_and_sync<T: Redux>(mask: u32, value: T) -> T {
    value.redux(mask, ReduxOp::And)
}

/// `__reduce_or_sync`: the bitwise or of `value` over the lanes of `mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce_or_sync<T: Redux>(mask: u32, value: T) -> T {
    value.redux(mask, ReduxOp::Or)
}

/// `__reduce_xor_sync`: the bitwise xor of `value` over the lanes of `mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce_xor_sync<T: Redux>(mask: u32, value: T) -> T {
    value.redux(mask, ReduxOp::Xor)
}

/// `op` folded over `value` of all 32 lanes of the warp (a butterfly of five shuffles); every lane
/// gets the result. `op` must be associative and commutative (a sum of floats is, up to
/// rounding: the lanes all get the same bits, in an order that is not the lanes').
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce<T: Shuffle>(value: T, op: impl Fn(T, T) -> T) -> T {
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::require_full_warp("warp::reduce");
    let mut v = value;
    let mut step = WARP_SIZE / 2;
    while step > 0 {
        v = op(v, shfl_xor_sync(FULL_MASK, v, step));
        step /= 2;
    }
    v
}

/// Lane `l` gets `op` folded over `value` of lanes `0..=l` (Hillis–Steele: five shuffles up). `op`
/// must be associative.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn inclusive_scan<T: Shuffle>(value: T, op: impl Fn(T, T) -> T) -> T {
    #[cfg(not(target_arch = "nvptx64"))]
    crate::sim::require_full_warp("warp::inclusive_scan");
    let lane = lane_id();
    let mut v = value;
    let mut step = 1;
    while step < WARP_SIZE {
        let below = shfl_up_sync(FULL_MASK, v, step);
        if lane >= step {
            v = op(below, v);
        }
        step *= 2;
    }
    v
}

/// Lane `l` gets `op` folded over `value` of lanes `0..l`, lane 0 `identity`; with the total of the
/// whole warp (what [`inclusive_scan`] gives lane 31).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn exclusive_scan<T: Shuffle>(value: T, op: impl Fn(T, T) -> T, identity: T) -> (T, T) {
    let inclusive = inclusive_scan(value, op);
    let total = shfl_sync(FULL_MASK, inclusive, WARP_SIZE - 1);
    let before = shfl_up_sync(FULL_MASK, inclusive, 1);
    (if lane_id() == 0 { identity } else { before }, total)
}
