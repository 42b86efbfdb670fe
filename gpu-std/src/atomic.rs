//! Atomic operations on global and shared memory: PTX `atom`, `red`, and ordered `ld`/`st`, with
//! explicit memory semantics and scope.
//!
//! An [`AtomicRef`] names one element, bounds-checked where it is made:
//!
//! ```ignore
//! hist.atomic(bin as usize).add(1);                 // global, relaxed, device scope (`red`)
//! let old = counts.atomic(i).fetch_max(v);          // `atom.max`, the previous value
//! bins.atomic(b).add(1);                             // a shared array: `red.shared`, block scope
//! flags.atomic(p).with_ordering(Ordering::Acquire).load();   // publish/observe with look-back
//! ```
//!
//! Relaxed at device scope is the default (CUDA's `atomicAdd`; block scope for shared memory);
//! [`AtomicRef::with_ordering`] and [`AtomicRef::with_scope`] choose others. Rust's own
//! `core::sync::atomic` types are not the way on the GPU: their orderings lower to system scope
//! there, and rustc's NVPTX atomics have open bugs.
//!
//! Types: `u32`, `i32`, `u64`, `i64`, `f32`, `f64` ([`Atomic`]); and/or/xor on the integers
//! ([`AtomicBits`]). Float min and max are compare-and-swap loops (PTX has them only from sm_90).
//!
//! In the simulator the same operations are the host's atomics on the same memory, so threads of
//! different blocks really contend; each one also lets the other threads of the block run.

use crate::warp::Shuffle;

/// Memory ordering of an atomic operation, as PTX's `.relaxed`, `.acquire`, `.release` and
/// `.acq_rel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// No ordering of other accesses: counters, histograms, reductions.
    Relaxed,
    /// Later accesses of this thread stay after it (a load or read-modify-write).
    Acquire,
    /// Earlier accesses of this thread stay before it (a store or read-modify-write).
    Release,
    /// Both (read-modify-write only).
    AcqRel,
}

/// The threads an atomic operation is atomic (and ordered) with, as PTX's `.cta`, `.gpu`, `.sys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The threads of this block.
    Block,
    /// Every thread of the GPU.
    Device,
    /// The GPU and the host (mapped host memory).
    System,
}

/// The state space of an [`AtomicRef`]'s address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub enum Space {
    Global,
    Shared,
    Generic,
}

/// One element of global or shared memory, for atomic operations. Made by
/// [`SliceMut::atomic`](crate::SliceMut::atomic) or
/// [`DynamicShared::atomic`](crate::shared::DynamicShared::atomic) (bounds-checked there), or from
/// a raw pointer. `Copy`, like a pointer.
#[derive(Clone, Copy, Debug)]
pub struct AtomicRef<T> {
    ptr: *mut T,
    space: Space,
    ordering: Ordering,
    scope: Scope,
}

impl<T: Atomic> AtomicRef<T> {
    #[inline(always)]
    pub(crate) fn new(ptr: *mut T, space: Space, scope: Scope) -> Self {
        Self { ptr, space, ordering: Ordering::Relaxed, scope }
    }

    /// An element at a generic address (global or shared), relaxed at device scope.
    ///
    /// # Safety
    /// `ptr` is valid, aligned and only accessed atomically while the operations run.
    #[inline(always)]
    pub unsafe fn from_ptr(ptr: *mut T) -> Self {
        Self::new(ptr, Space::Generic, Scope::Device)
    }

    /// The same element with another memory ordering.
    #[inline(always)]
    pub fn with_ordering(self, ordering: Ordering) -> Self {
        Self { ordering, ..self }
    }

    /// The same element with another scope.
    #[inline(always)]
    pub fn with_scope(self, scope: Scope) -> Self {
        Self { scope, ..self }
    }

    /// The address.
    #[inline(always)]
    pub fn as_ptr(self) -> *mut T {
        self.ptr
    }

    /// Adds `v` and returns the previous value (`atom.add`; floats round as an addition does).
    #[inline(always)]
    pub fn fetch_add(self, v: T) -> T {
        // SAFETY: `AtomicRef`s are made for valid elements.
        unsafe { T::atom(self, Op::Add, v, v) }
    }

    /// Adds `v` (`red.add`: no result to wait for, the cheapest way to count).
    #[inline(always)]
    pub fn add(self, v: T) {
        // SAFETY: as above.
        unsafe { T::red(self, v) }
    }

    /// Stores the smaller of the element and `v`; returns the previous value.
    #[inline(always)]
    pub fn fetch_min(self, v: T) -> T {
        // SAFETY: as above.
        unsafe { T::atom(self, Op::Min, v, v) }
    }

    /// Stores the larger of the element and `v`; returns the previous value.
    #[inline(always)]
    pub fn fetch_max(self, v: T) -> T {
        // SAFETY: as above.
        unsafe { T::atom(self, Op::Max, v, v) }
    }

    /// Stores `v`; returns the previous value (`atom.exch`).
    #[inline(always)]
    pub fn swap(self, v: T) -> T {
        // SAFETY: as above.
        unsafe { T::atom(self, Op::Exchange, v, v) }
    }

    /// Stores `new` if the element is `current` (bit for bit): `Ok(current)` if it did, else
    /// `Err(actual)` (`atom.cas`).
    #[inline(always)]
    pub fn compare_exchange(self, current: T, new: T) -> Result<T, T> {
        // SAFETY: as above.
        let old = unsafe { T::atom(self, Op::CompareExchange, new, current) };
        if Shuffle::to_bits(old) == Shuffle::to_bits(current) { Ok(old) } else { Err(old) }
    }

    /// Reads the element (`ld.relaxed` or `ld.acquire`; a `Release` ordering reads as relaxed, an
    /// `AcqRel` one as acquire).
    #[inline(always)]
    pub fn load(self) -> T {
        // SAFETY: as above.
        unsafe { T::load(self) }
    }

    /// Writes the element (`st.relaxed` or `st.release`; an `Acquire` ordering writes as relaxed,
    /// an `AcqRel` one as release).
    #[inline(always)]
    pub fn store(self, v: T) {
        // SAFETY: as above.
        unsafe { T::store(self, v) }
    }
}

impl<T: AtomicBits> AtomicRef<T> {
    /// Bitwise and with `v`; returns the previous value.
    #[inline(always)]
    pub fn fetch_and(self, v: T) -> T {
        // SAFETY: `AtomicRef`s are made for valid elements.
        unsafe { T::atom(self, Op::And, v, v) }
    }

    /// Bitwise or with `v`; returns the previous value.
    #[inline(always)]
    pub fn fetch_or(self, v: T) -> T {
        // SAFETY: as above.
        unsafe { T::atom(self, Op::Or, v, v) }
    }

    /// Bitwise xor with `v`; returns the previous value.
    #[inline(always)]
    pub fn fetch_xor(self, v: T) -> T {
        // SAFETY: as above.
        unsafe { T::atom(self, Op::Xor, v, v) }
    }
}

/// A read-modify-write operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub enum Op {
    Add,
    Min,
    Max,
    Exchange,
    CompareExchange,
    And,
    Or,
    Xor,
}

mod sealed {
    pub trait Sealed {}
}

/// A type with atomic operations on the GPU: `u32`, `i32`, `u64`, `i64`, `f32`, `f64` (its bits, for
/// compare-and-swap, as [`Shuffle`] gives them).
pub trait Atomic: crate::warp::Shuffle + PartialOrd + sealed::Sealed {
    /// `op` with operand `v` (and, for compare-and-swap, the expected `cmp`); the previous value.
    #[doc(hidden)]
    unsafe fn atom(at: AtomicRef<Self>, op: Op, v: Self, cmp: Self) -> Self;
    #[doc(hidden)]
    unsafe fn red(at: AtomicRef<Self>, v: Self);
    #[doc(hidden)]
    unsafe fn load(at: AtomicRef<Self>) -> Self;
    #[doc(hidden)]
    unsafe fn store(at: AtomicRef<Self>, v: Self);
}

/// The integer [`Atomic`] types, which also have and/or/xor.
pub trait AtomicBits: Atomic {}
impl AtomicBits for u32 {}
impl AtomicBits for i32 {}
impl AtomicBits for u64 {}
impl AtomicBits for i64 {}

/// Expands `$m!(space, cvta, sem, scope, args…)` for the run-time space, ordering (one of
/// `$orders`) and scope; the arms of a constant ordering and scope fold away.
#[cfg(target_arch = "nvptx64")]
macro_rules! qualified {
    ($at:expr, $ordering:expr; [$($order:ident => $sem:literal),*]; $m:ident! $args:tt) => {
        match $at.space {
            Space::Global => qualified!(@ordering ".global", "cvta.to.global.u64", $ordering, $at.scope; [$($order => $sem),*]; $m! $args),
            Space::Shared => qualified!(@ordering ".shared", "cvta.to.shared.u64", $ordering, $at.scope; [$($order => $sem),*]; $m! $args),
            Space::Generic => qualified!(@ordering "", "mov.u64", $ordering, $at.scope; [$($order => $sem),*]; $m! $args),
        }
    };
    (@ordering $sp:literal, $cvta:literal, $ordering:expr, $scope:expr; [$($order:ident => $sem:literal),*]; $m:ident! $args:tt) => {
        match $ordering {
            $(Ordering::$order => qualified!(@scope $sp, $cvta, $sem, $scope; $m! $args),)*
            #[allow(unreachable_patterns)]
            _ => unreachable!(),
        }
    };
    (@scope $sp:literal, $cvta:literal, $sem:literal, $scope:expr; $m:ident! $args:tt) => {
        match $scope {
            Scope::Block => $m!($sp, $cvta, $sem, ".cta", $args),
            Scope::Device => $m!($sp, $cvta, $sem, ".gpu", $args),
            Scope::System => $m!($sp, $cvta, $sem, ".sys", $args),
        }
    };
}

/// `atom` with one operand.
#[cfg(target_arch = "nvptx64")]
macro_rules! atom_asm {
    ($sp:literal, $cvta:literal, $sem:literal, $sc:literal, ($op:expr, $reg:ident, $t:ty, $ptr:expr, $v:expr)) => {{
        let out: $t;
        core::arch::asm!(
            concat!("{{ .reg .u64 %a; ", $cvta, " %a, {ptr}; atom", $sem, $sc, $sp, ".", $op, " {out}, [%a], {v}; }}"),
            ptr = in(reg64) $ptr, v = in($reg) $v, out = out($reg) out, options(nostack)
        );
        out
    }};
}

/// `atom.cas`.
#[cfg(target_arch = "nvptx64")]
macro_rules! cas_asm {
    ($sp:literal, $cvta:literal, $sem:literal, $sc:literal, ($op:expr, $reg:ident, $t:ty, $ptr:expr, $cmp:expr, $new:expr)) => {{
        let out: $t;
        core::arch::asm!(
            concat!("{{ .reg .u64 %a; ", $cvta, " %a, {ptr}; atom", $sem, $sc, $sp, ".", $op, " {out}, [%a], {cmp}, {new}; }}"),
            ptr = in(reg64) $ptr, cmp = in($reg) $cmp, new = in($reg) $new, out = out($reg) out, options(nostack)
        );
        out
    }};
}

/// `red`, `st`: a store-like instruction with one operand and no result.
#[cfg(target_arch = "nvptx64")]
macro_rules! store_asm {
    ($sp:literal, $cvta:literal, $sem:literal, $sc:literal, ($inst:literal, $op:expr, $reg:ident, $ptr:expr, $v:expr)) => {
        core::arch::asm!(
            concat!("{{ .reg .u64 %a; ", $cvta, " %a, {ptr}; ", $inst, $sem, $sc, $sp, $op, " [%a], {v}; }}"),
            ptr = in(reg64) $ptr, v = in($reg) $v, options(nostack)
        )
    };
}

/// `ld`.
#[cfg(target_arch = "nvptx64")]
macro_rules! load_asm {
    ($sp:literal, $cvta:literal, $sem:literal, $sc:literal, ($op:expr, $reg:ident, $t:ty, $ptr:expr)) => {{
        let out: $t;
        core::arch::asm!(
            concat!("{{ .reg .u64 %a; ", $cvta, " %a, {ptr}; ld", $sem, $sc, $sp, $op, " {out}, [%a]; }}"),
            ptr = in(reg64) $ptr, out = out($reg) out, options(nostack, readonly)
        );
        out
    }};
}

/// The orderings `ld`/`st`/`red` take, from any [`Ordering`].
#[inline(always)]
fn load_ordering(o: Ordering) -> Ordering {
    match o {
        Ordering::Relaxed | Ordering::Release => Ordering::Relaxed,
        Ordering::Acquire | Ordering::AcqRel => Ordering::Acquire,
    }
}

#[inline(always)]
fn store_ordering(o: Ordering) -> Ordering {
    match o {
        Ordering::Relaxed | Ordering::Acquire => Ordering::Relaxed,
        Ordering::Release | Ordering::AcqRel => Ordering::Release,
    }
}

/// Implements [`Atomic`] for an integer type: `$bits` is its PTX bit width, `$add`/`$minmax` the
/// PTX types of add and min/max, `$reg` its register class.
macro_rules! atomic_integer {
    ($t:ty, $bits:literal, $add:literal, $minmax:literal, $reg:ident, $std:ident) => {
        impl sealed::Sealed for $t {}
        impl Atomic for $t {
            #[inline(always)]
            unsafe fn atom(at: AtomicRef<Self>, op: Op, v: Self, cmp: Self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the caller's `AtomicRef` names a valid element of its space.
                unsafe {
                    let orders = at.ordering;
                    let p = at.ptr as u64;
                    match op {
                        Op::Add => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            atom_asm!(concat!("add.", $add), $reg, $t, p, v)),
                        Op::Min => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            atom_asm!(concat!("min.", $minmax), $reg, $t, p, v)),
                        Op::Max => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            atom_asm!(concat!("max.", $minmax), $reg, $t, p, v)),
                        Op::Exchange => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            atom_asm!(concat!("exch.b", $bits), $reg, $t, p, v)),
                        Op::CompareExchange => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            cas_asm!(concat!("cas.b", $bits), $reg, $t, p, cmp, v)),
                        Op::And => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            atom_asm!(concat!("and.b", $bits), $reg, $t, p, v)),
                        Op::Or => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            atom_asm!(concat!("or.b", $bits), $reg, $t, p, v)),
                        Op::Xor => qualified!(at, orders; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                            atom_asm!(concat!("xor.b", $bits), $reg, $t, p, v)),
                    }
                }
                #[cfg(not(target_arch = "nvptx64"))]
                // SAFETY: as above; the host's atomic of the same width on the same memory.
                unsafe {
                    use std::sync::atomic::$std as A;
                    let a = A::from_ptr(at.ptr);
                    let o = host_ordering(at.ordering);
                    let old = match op {
                        Op::Add => a.fetch_add(v, o),
                        Op::Min => a.fetch_min(v, o),
                        Op::Max => a.fetch_max(v, o),
                        Op::Exchange => a.swap(v, o),
                        Op::CompareExchange => {
                            a.compare_exchange(cmp, v, o, load_host_ordering(at.ordering)).unwrap_or_else(|x| x)
                        }
                        Op::And => a.fetch_and(v, o),
                        Op::Or => a.fetch_or(v, o),
                        Op::Xor => a.fetch_xor(v, o),
                    };
                    crate::sim::yield_now();
                    old
                }
            }
            #[inline(always)]
            unsafe fn red(at: AtomicRef<Self>, v: Self) {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: as for `atom`.
                unsafe {
                    let p = at.ptr as u64;
                    qualified!(at, store_ordering(at.ordering); [Relaxed => ".relaxed", Release => ".release"];
                        store_asm!("red", concat!(".add.", $add), $reg, p, v))
                }
                #[cfg(not(target_arch = "nvptx64"))]
                // SAFETY: as for `atom`.
                unsafe {
                    Self::atom(at, Op::Add, v, v);
                }
            }
            #[inline(always)]
            unsafe fn load(at: AtomicRef<Self>) -> Self {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: as for `atom`.
                unsafe {
                    let p = at.ptr as u64;
                    qualified!(at, load_ordering(at.ordering); [Relaxed => ".relaxed", Acquire => ".acquire"];
                        load_asm!(concat!(".b", $bits), $reg, $t, p))
                }
                #[cfg(not(target_arch = "nvptx64"))]
                // SAFETY: as for `atom`.
                unsafe {
                    let v = std::sync::atomic::$std::from_ptr(at.ptr).load(load_host_ordering(at.ordering));
                    crate::sim::yield_now();
                    v
                }
            }
            #[inline(always)]
            unsafe fn store(at: AtomicRef<Self>, v: Self) {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: as for `atom`.
                unsafe {
                    let p = at.ptr as u64;
                    qualified!(at, store_ordering(at.ordering); [Relaxed => ".relaxed", Release => ".release"];
                        store_asm!("st", concat!(".b", $bits), $reg, p, v))
                }
                #[cfg(not(target_arch = "nvptx64"))]
                // SAFETY: as for `atom`.
                unsafe {
                    std::sync::atomic::$std::from_ptr(at.ptr).store(v, store_host_ordering(at.ordering));
                    crate::sim::yield_now();
                }
            }
        }
    };
}
atomic_integer!(u32, "32", "u32", "u32", reg32, AtomicU32);
atomic_integer!(i32, "32", "s32", "s32", reg32, AtomicI32);
atomic_integer!(u64, "64", "u64", "u64", reg64, AtomicU64);
atomic_integer!(i64, "64", "u64", "s64", reg64, AtomicI64);

/// Implements [`Atomic`] for a float type through its bits: add by `atom.add`, min and max by a
/// compare-and-swap loop.
macro_rules! atomic_float {
    ($t:ty, $u:ty, $bits:literal, $reg:ident) => {
        impl sealed::Sealed for $t {}
        impl Atomic for $t {
            #[inline(always)]
            unsafe fn atom(at: AtomicRef<Self>, op: Op, v: Self, cmp: Self) -> Self {
                let bits = AtomicRef::<$u> { ptr: at.ptr as *mut $u, space: at.space, ordering: at.ordering, scope: at.scope };
                // SAFETY (every operation below): the caller's `AtomicRef` names a valid element.
                match op {
                    Op::Add => unsafe { float_add(at, v) },
                    Op::Min | Op::Max => {
                        let mut old = unsafe { <$u>::load(bits.with_ordering(Ordering::Relaxed)) };
                        loop {
                            let current = <$t>::from_bits(old);
                            let wanted = if op == Op::Min { current.min(v) } else { current.max(v) };
                            if wanted.to_bits() == old {
                                return current;
                            }
                            match bits.compare_exchange(old, wanted.to_bits()) {
                                Ok(_) => return current,
                                Err(actual) => old = actual,
                            }
                        }
                    }
                    Op::Exchange => <$t>::from_bits(bits.swap(v.to_bits())),
                    Op::CompareExchange => {
                        let r = bits.compare_exchange(cmp.to_bits(), v.to_bits());
                        <$t>::from_bits(r.unwrap_or_else(|x| x))
                    }
                    Op::And | Op::Or | Op::Xor => unreachable!("no bitwise atomics on floats"),
                }
            }
            #[inline(always)]
            unsafe fn red(at: AtomicRef<Self>, v: Self) {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: as for `atom`.
                unsafe {
                    let p = at.ptr as u64;
                    qualified!(at, store_ordering(at.ordering); [Relaxed => ".relaxed", Release => ".release"];
                        store_asm!("red", concat!(".add.f", $bits), $reg, p, v))
                }
                #[cfg(not(target_arch = "nvptx64"))]
                // SAFETY: as for `atom`.
                unsafe {
                    float_add(at, v);
                }
            }
            #[inline(always)]
            unsafe fn load(at: AtomicRef<Self>) -> Self {
                let bits = AtomicRef::<$u> { ptr: at.ptr as *mut $u, space: at.space, ordering: at.ordering, scope: at.scope };
                <$t>::from_bits(bits.load())
            }
            #[inline(always)]
            unsafe fn store(at: AtomicRef<Self>, v: Self) {
                let bits = AtomicRef::<$u> { ptr: at.ptr as *mut $u, space: at.space, ordering: at.ordering, scope: at.scope };
                bits.store(v.to_bits())
            }
        }
    };
}
atomic_float!(f32, u32, "32", reg32);
atomic_float!(f64, u64, "64", reg64);

/// `atom.add` of a float: one instruction on the GPU, a compare-and-swap loop on the host.
///
/// # Safety
/// `at` names a valid element.
#[inline(always)]
unsafe fn float_add<T: FloatBits>(at: AtomicRef<T>, v: T) -> T {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: guaranteed by the caller.
    unsafe {
        T::atom_add(at, v)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let bits = AtomicRef::<T::Bits> {
            ptr: at.ptr as *mut T::Bits,
            space: at.space,
            ordering: Ordering::Relaxed,
            scope: at.scope,
        };
        let mut old = bits.load();
        loop {
            let new = T::bits_of(T::from_float_bits(old).plus(v));
            match bits.with_ordering(at.ordering).compare_exchange(old, new) {
                Ok(_) => return T::from_float_bits(old),
                Err(actual) => old = actual,
            }
        }
    }
}

/// f32 and f64 with their bit types, for [`float_add`].
trait FloatBits: Atomic {
    type Bits: Atomic;
    #[cfg(not(target_arch = "nvptx64"))]
    fn plus(self, other: Self) -> Self;
    #[cfg(not(target_arch = "nvptx64"))]
    fn bits_of(self) -> Self::Bits;
    #[cfg(not(target_arch = "nvptx64"))]
    fn from_float_bits(bits: Self::Bits) -> Self;
    #[cfg(target_arch = "nvptx64")]
    unsafe fn atom_add(at: AtomicRef<Self>, v: Self) -> Self;
}

macro_rules! float_bits {
    ($t:ty, $u:ty, $bits:literal, $reg:ident) => {
        impl FloatBits for $t {
            type Bits = $u;
            #[cfg(not(target_arch = "nvptx64"))]
            fn plus(self, other: Self) -> Self {
                self + other
            }
            #[cfg(not(target_arch = "nvptx64"))]
            fn bits_of(self) -> $u {
                self.to_bits()
            }
            #[cfg(not(target_arch = "nvptx64"))]
            fn from_float_bits(bits: $u) -> Self {
                <$t>::from_bits(bits)
            }
            #[cfg(target_arch = "nvptx64")]
            #[inline(always)]
            unsafe fn atom_add(at: AtomicRef<Self>, v: Self) -> Self {
                let p = at.ptr as u64;
                // SAFETY: the caller's `AtomicRef` names a valid element.
                unsafe {
                    qualified!(at, at.ordering; [Relaxed => ".relaxed", Acquire => ".acquire", Release => ".release", AcqRel => ".acq_rel"];
                        atom_asm!(concat!("add.f", $bits), $reg, $t, p, v))
                }
            }
        }
    };
}
float_bits!(f32, u32, "32", reg32);
float_bits!(f64, u64, "64", reg64);

#[cfg(not(target_arch = "nvptx64"))]
fn host_ordering(o: Ordering) -> std::sync::atomic::Ordering {
    match o {
        Ordering::Relaxed => std::sync::atomic::Ordering::Relaxed,
        Ordering::Acquire => std::sync::atomic::Ordering::Acquire,
        Ordering::Release => std::sync::atomic::Ordering::Release,
        Ordering::AcqRel => std::sync::atomic::Ordering::AcqRel,
    }
}

#[cfg(not(target_arch = "nvptx64"))]
fn load_host_ordering(o: Ordering) -> std::sync::atomic::Ordering {
    host_ordering(load_ordering(o))
}

#[cfg(not(target_arch = "nvptx64"))]
fn store_host_ordering(o: Ordering) -> std::sync::atomic::Ordering {
    host_ordering(store_ordering(o))
}

/// A memory fence: orders this thread's memory accesses before it against those after it, for the
/// threads of `scope` (`fence.acq_rel.cta|gpu|sys`; CUDA's `__threadfence_block`,
/// `__threadfence`, `__threadfence_system`).
#[inline(always)]
pub fn fence(scope: Scope) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: a fence has no memory-safety preconditions.
    unsafe {
        match scope {
            Scope::Block => core::arch::asm!("fence.acq_rel.cta;", options(nostack)),
            Scope::Device => core::arch::asm!("fence.acq_rel.gpu;", options(nostack)),
            Scope::System => core::arch::asm!("fence.acq_rel.sys;", options(nostack)),
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = scope;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}
