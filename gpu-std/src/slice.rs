//! Device slices: the kernel-parameter form of `&[T]` and `&mut [T]`.
//!
//! A kernel written as `pub fn saxpy(a: f32, x: &[f32], y: &mut [f32])` receives `x` as a
//! [`Slice<f32>`] and `y` as a [`SliceMut<f32>`]: a pointer to global memory and a `u32` length.
//! `#[kernel]` makes that rewrite, and passes each slice to the PTX entry as two parameters, the
//! pointer and the length: the PTX never depends on how rustc lowers real fat pointers (or structs)
//! for the `ptx-kernel` ABI, and LLVM knows the pointer is global memory (`ld.global`), as for a
//! raw pointer argument. On the host the launcher builds them from `&Buffer<T>` /
//! `&mut Buffer<T>`.
//!
//! Indexing (`x[i]`, `y[i] = v`, `get`, `sub`, `tail`) is always bounds-checked:
//!
//! * in the simulator an index out of range panics with the index, the length and the kernel's
//!   source line; the simulator adds the kernel's name, block and thread;
//! * on the GPU it executes `trap`, which aborts the launch (the host sees a kernel failure).
//!
//! A check is one compare and a predicated branch, and LLVM drops it where an earlier comparison
//! already proves the index in range (`if i < x.len() { x[i] }`, or a loop bounded by a length).
//! Where it cannot, and the loop is hot, the unsafe [`Slice::get_unchecked`] /
//! [`SliceMut::set_unchecked`] skip it on the GPU — still checked in the simulator, so the tests
//! catch a broken promise.
//!
//! Images and matrices are row-major: [`Slice::matrix`] / [`SliceMut::matrix`] view a slice as
//! `rows × cols` ([`Matrix`], [`MatrixMut`]) after one check (`rows·cols ≤ len`), and then index
//! with `m[(row, col)]` (`u32`, like the thread indices) or take whole rows (`m.row(r)`). Their
//! checks compare with the `rows` and `cols` the kernel passed, so the usual guard
//! `if row < rows && col < cols` proves them and LLVM drops them: a per-pixel kernel pays for its
//! bounds once per launch, not once per access. A matrix whose rows are longer than the columns
//! used (BLAS's leading dimension: the first `k` of `ld` columns) is
//! [`strided_matrix`](Slice::strided_matrix)`(rows, cols, stride)`.
//!
//! Both types are `Copy`, like the pointers they replace: threads of a launch share them, and which
//! thread writes which element is the kernel's contract, as in CUDA.

use core::marker::PhantomData;

use crate::global;
use core::ops::{Index, IndexMut};

/// Read-only device slice: `len` elements of `T` in global memory. See the module documentation.
#[repr(C)]
pub struct Slice<T> {
    ptr: *const T,
    len: u32,
    _marker: PhantomData<T>,
}

/// Writable device slice: `len` elements of `T` in global memory. See the module documentation.
#[repr(C)]
pub struct SliceMut<T> {
    ptr: *mut T,
    len: u32,
    _marker: PhantomData<T>,
}

impl<T> Clone for Slice<T> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Slice<T> {}
impl<T> Clone for SliceMut<T> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SliceMut<T> {}

/// Defines a cold function that stops the kernel when an access is out of range: `trap` on the GPU
/// (the host sees a launch failure), in the simulator a panic with the message at the caller's
/// location.
macro_rules! stop_fn {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $($message:tt)+) => {
        $(#[$doc])*
        #[cold]
        #[cfg_attr(target_arch = "nvptx64", inline(always))]
        #[cfg_attr(not(target_arch = "nvptx64"), inline(never))]
        #[track_caller]
        fn $name($($arg: $ty),*) -> ! {
            #[cfg(target_arch = "nvptx64")]
            {
                let _ = ($($arg),*);
                // SAFETY: `trap` aborts the kernel; the host sees a launch failure.
                unsafe { core::arch::nvptx::trap() }
            }
            #[cfg(not(target_arch = "nvptx64"))]
            panic!($($message)+)
        }
    };
}

stop_fn! {
    /// Stops the kernel: `index` is not below `len`.
    fn out_of_range(index: usize, len: u32) => "slice index {index} out of range for a slice of {len} elements"
}

stop_fn! {
    /// Stops the kernel: `start..start + count` is not inside `0..len`.
    fn range_out_of_range(start: usize, count: usize, len: u32) =>
        "sub-slice of {count} elements at {start} out of range for a slice of {len} elements"
}

/// The simulator's check of an `_unchecked` access (the GPU does none).
#[inline(always)]
#[track_caller]
fn check_unchecked(index: usize, len: u32) {
    #[cfg(not(target_arch = "nvptx64"))]
    if index >= len as usize {
        panic!("unchecked slice index {index} out of range for a slice of {len} elements")
    }
    #[cfg(target_arch = "nvptx64")]
    let _ = (index, len);
}

/// `start..start + count` inside `0..len`, as a `u32` count (the new length).
#[inline(always)]
#[track_caller]
fn checked_range(start: usize, count: usize, len: u32) -> u32 {
    match start.checked_add(count) {
        Some(end) if end <= len as usize => count as u32,
        _ => range_out_of_range(start, count, len),
    }
}

macro_rules! common_methods {
    ($name:ident, $ptr:ty) => {
        impl<T: Copy> $name<T> {
            /// A slice of `len` elements at `ptr`. The launcher makes these from buffers; a kernel
            /// needs this only to view memory it was given some other way.
            ///
            /// # Safety
            /// `ptr` must be valid for `len` elements (reads, and writes for [`SliceMut`]) for as
            /// long as the slice is used.
            #[inline(always)]
            pub const unsafe fn from_raw_parts(ptr: $ptr, len: u32) -> Self {
                Self { ptr, len, _marker: PhantomData }
            }

            /// Number of elements.
            #[inline(always)]
            pub fn len(&self) -> usize {
                self.len as usize
            }

            /// Number of elements as the `u32` the kernels' thread indices are.
            #[inline(always)]
            pub fn len_u32(&self) -> u32 {
                self.len
            }

            /// Whether the slice has no elements.
            #[inline(always)]
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }

            /// Element `i`, or `None` past the end.
            #[inline(always)]
            pub fn get(&self, i: usize) -> Option<T> {
                // SAFETY: `i` is in range.
                (i < self.len as usize).then(|| unsafe { self.ptr.add(i).read() })
            }

            /// Element `i` without the GPU's bounds check (the simulator still checks), for hot
            /// loops where LLVM cannot see that `i` is in range.
            ///
            /// # Safety
            /// `i < self.len()`.
            #[inline(always)]
            #[track_caller]
            pub unsafe fn get_unchecked(&self, i: usize) -> T {
                check_unchecked(i, self.len);
                // SAFETY: the caller's promise.
                unsafe { self.ptr.add(i).read() }
            }

            /// The `count` elements starting at `start` (checked like an index): e.g. one image of
            /// a batch, `x.sub(z * stride, stride)`.
            #[inline(always)]
            #[track_caller]
            pub fn sub(self, start: usize, count: usize) -> Self {
                let len = checked_range(start, count, self.len);
                // SAFETY: inside this slice, checked above.
                Self { ptr: unsafe { self.ptr.add(start) }, len, _marker: PhantomData }
            }

            /// The `count` elements starting at `start`, without the GPU's check (the simulator
            /// still checks, and checks every later access against `count`): per-image views of a
            /// batch in kernels whose accesses are unchecked anyway.
            ///
            /// # Safety
            /// `start + count ≤ self.len()`.
            #[inline(always)]
            #[track_caller]
            pub unsafe fn sub_unchecked(self, start: usize, count: usize) -> Self {
                #[cfg(not(target_arch = "nvptx64"))]
                checked_range(start, count, self.len);
                // SAFETY: the caller's promise.
                Self { ptr: unsafe { self.ptr.add(start) }, len: count as u32, _marker: PhantomData }
            }

            /// The elements from `start` to the end (`start ≤ len`, checked).
            #[inline(always)]
            #[track_caller]
            pub fn tail(self, start: usize) -> Self {
                let count = (self.len as usize).wrapping_sub(start);
                self.sub(start, count)
            }

            /// The first element's address, for access patterns indexing does not cover (vector
            /// loads, `cp.async`). Valid for [`len`](Self::len) elements.
            #[inline(always)]
            pub fn as_ptr(&self) -> *const T {
                self.ptr
            }

            /// The addresses of the pointer and the length, the two PTX parameters a slice is
            /// passed as (see `#[kernel]`).
            #[cfg(not(target_arch = "nvptx64"))]
            #[doc(hidden)]
            pub fn kernel_params(&self) -> [*mut core::ffi::c_void; 2] {
                [&self.ptr as *const _ as *mut _, &self.len as *const _ as *mut _]
            }
        }

        impl<T: Copy> Index<usize> for $name<T> {
            type Output = T;
            #[inline(always)]
            #[track_caller]
            fn index(&self, i: usize) -> &T {
                if i >= self.len as usize {
                    out_of_range(i, self.len);
                }
                // SAFETY: in range, checked above.
                unsafe { &*self.ptr.add(i) }
            }
        }
    };
}

common_methods!(Slice, *const T);
common_methods!(SliceMut, *mut T);

impl Slice<f32> {
    /// Elements `i..i + 4` in one 16-byte load ([`global::load_f32x4`]), without the GPU's bounds
    /// check (the simulator checks the range and the alignment).
    ///
    /// # Safety
    /// `i + 4 ≤ self.len()`, the address of element `i` is 16-byte aligned, and no thread writes
    /// these elements during the kernel.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn load_f32x4_unchecked(&self, i: usize) -> [f32; 4] {
        check_unchecked(i + 3, self.len);
        // SAFETY: the caller's promise.
        unsafe { global::load_f32x4(self.ptr.add(i)) }
    }
}

impl Slice<u32> {
    /// Elements `i..i + 4` in one 16-byte load (`ld.global.v4`), without the GPU's bounds check
    /// (the simulator checks the range and the alignment).
    ///
    /// # Safety
    /// As for [`Slice::load_f32x4_unchecked`].
    #[inline(always)]
    #[track_caller]
    pub unsafe fn load_u32x4_unchecked(&self, i: usize) -> [u32; 4] {
        check_unchecked(i + 3, self.len);
        // SAFETY: the caller's promise; the load moves bits, whatever their type.
        unsafe { global::load_f32x4(self.ptr.add(i) as *const f32).map(f32::to_bits) }
    }
}

impl SliceMut<u32> {
    /// Writes elements `i..i + 4` in one 16-byte store (`st.global.v4`), without the GPU's bounds
    /// check (the simulator checks the range and the alignment).
    ///
    /// # Safety
    /// `i + 4 ≤ self.len()`, the address of element `i` is 16-byte aligned, and no other thread
    /// accesses these elements during the kernel.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn store_u32x4_unchecked(&mut self, i: usize, value: [u32; 4]) {
        check_unchecked(i + 3, self.len);
        // SAFETY: the caller's promise; the store moves bits, whatever their type.
        unsafe { global::store_f32x4(self.ptr.add(i) as *mut f32, value.map(f32::from_bits)) }
    }
}

/// Defines a clipped vector store of `SliceMut<f32>` (see [`SliceMut::store_f32x4_clipped`]).
macro_rules! clipped_store {
    ($name:ident, $n:literal, $bytes:literal, $store:path) => {
        #[doc = concat!(
            "Stores `values` to elements `at..at + ", stringify!($n), "`, which are columns `col..` ",
            "of a row of `cols` columns, clipped to the row: one ", stringify!($bytes), "-byte store ",
            "([`", stringify!($store), "`]) where `vector` and all ", stringify!($n), " fit, else one ",
            "store per element left of `cols`. The epilogue of a tile at the right edge of a matrix. ",
            "Not checked on the GPU (the simulator checks each element stored).\n\n",
            "# Safety\n",
            "The elements stored lie in the slice; with `vector`, element `at` is ",
            stringify!($bytes), "-byte aligned wherever all ", stringify!($n), " fit; no other ",
            "thread accesses them during the kernel."
        )]
        #[inline(always)]
        #[track_caller]
        pub unsafe fn $name(&mut self, at: usize, col: u32, cols: u32, values: [f32; $n], vector: bool) {
            // An address only (`wrapping_add`: a clipped column may lie past the end); what is
            // stored through it is the caller's promise.
            let ptr = self.ptr.wrapping_add(at);
            if vector && col + $n <= cols {
                check_unchecked(at + ($n - 1), self.len);
                // SAFETY: the caller's promise.
                unsafe { $store(ptr, values) }
            } else {
                for e in 0..$n {
                    if col + (e as u32) < cols {
                        check_unchecked(at + e, self.len);
                        // SAFETY: the caller's promise.
                        unsafe { ptr.add(e).write(values[e]) }
                    }
                }
            }
        }
    };
}

impl SliceMut<f32> {
    /// Stores `value` to elements `i..i + 4` in one 16-byte store ([`global::store_f32x4`]),
    /// without the GPU's bounds check (the simulator checks the range and the alignment).
    ///
    /// # Safety
    /// `i + 4 ≤ self.len()`, the address of element `i` is 16-byte aligned, and no other thread
    /// accesses these elements during the kernel.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn store_f32x4_unchecked(&mut self, i: usize, value: [f32; 4]) {
        check_unchecked(i + 3, self.len);
        // SAFETY: the caller's promise.
        unsafe { global::store_f32x4(self.ptr.add(i), value) }
    }

    /// Stores `value` to elements `i..i + 2` in one 8-byte store ([`global::store_f32x2`]),
    /// without the GPU's bounds check (the simulator checks the range and the alignment).
    ///
    /// # Safety
    /// `i + 2 ≤ self.len()`, the address of element `i` is 8-byte aligned, and no other thread
    /// accesses these elements during the kernel.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn store_f32x2_unchecked(&mut self, i: usize, value: [f32; 2]) {
        check_unchecked(i + 1, self.len);
        // SAFETY: the caller's promise.
        unsafe { global::store_f32x2(self.ptr.add(i), value) }
    }

    clipped_store!(store_f32x4_clipped, 4, 16, global::store_f32x4);
    clipped_store!(store_f32x4_clipped_streaming, 4, 16, global::store_f32x4_streaming);
    clipped_store!(store_f32x2_clipped, 2, 8, global::store_f32x2);
    clipped_store!(store_f32x2_clipped_streaming, 2, 8, global::store_f32x2_streaming);
}

impl<T: Copy> SliceMut<T> {
    /// Writes `value` to element `i` without the GPU's bounds check (the simulator still checks).
    ///
    /// # Safety
    /// `i < self.len()`.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn set_unchecked(&mut self, i: usize, value: T) {
        check_unchecked(i, self.len);
        // SAFETY: the caller's promise.
        unsafe { self.ptr.add(i).write(value) }
    }

    /// Element `i` for atomic operations (`atom.global`/`red.global`, relaxed at device scope; see
    /// [`atomic`](crate::atomic)), checked as `self[i]` is.
    #[inline(always)]
    #[track_caller]
    pub fn atomic(&self, i: usize) -> crate::atomic::AtomicRef<T>
    where
        T: crate::atomic::Atomic,
    {
        if i >= self.len as usize {
            out_of_range(i, self.len);
        }
        // SAFETY: in bounds, checked above.
        let ptr = unsafe { self.ptr.add(i) };
        crate::atomic::AtomicRef::new(ptr, crate::atomic::Space::Global, crate::atomic::Scope::Device)
    }

    /// The first element's address, writable (see [`SliceMut::as_ptr`]).
    #[inline(always)]
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// A read-only view of the same elements, for helpers that only read.
    #[inline(always)]
    pub fn as_slice(&self) -> Slice<T> {
        Slice { ptr: self.ptr, len: self.len, _marker: PhantomData }
    }
}

impl<T: Copy> IndexMut<usize> for SliceMut<T> {
    #[inline(always)]
    #[track_caller]
    fn index_mut(&mut self, i: usize) -> &mut T {
        if i >= self.len as usize {
            out_of_range(i, self.len);
        }
        // SAFETY: in range, checked above.
        unsafe { &mut *self.ptr.add(i) }
    }
}

/// Read-only row-major `rows × cols` view of a [`Slice`]: element `(r, c)` is `r·stride + c`, with
/// `stride = cols` ([`Slice::matrix`]) or larger ([`Slice::strided_matrix`]); see the module
/// documentation.
#[derive(Clone, Copy)]
pub struct Matrix<T> {
    data: Slice<T>,
    rows: u32,
    cols: u32,
    stride: u32,
}

/// Writable row-major `rows × cols` view of a [`SliceMut`]. Made by [`SliceMut::matrix`] or
/// [`SliceMut::strided_matrix`].
#[derive(Clone, Copy)]
pub struct MatrixMut<T> {
    data: SliceMut<T>,
    rows: u32,
    cols: u32,
    stride: u32,
}

/// `rows·cols ≤ len` as the `u32` element count of the view.
#[inline(always)]
#[track_caller]
fn checked_matrix(rows: u32, cols: u32, len: u32) -> u32 {
    let count = rows as usize * cols as usize;
    if count > len as usize {
        range_out_of_range(0, count, len);
    }
    count as u32
}

/// Elements from the first to the last of a `rows × cols` view with rows `stride` apart
/// (`cols ≤ stride`, and that many `≤ len`), as a `u32`.
#[inline(always)]
#[track_caller]
fn checked_strided_matrix(rows: u32, cols: u32, stride: u32, len: u32) -> u32 {
    let span = if rows == 0 { 0 } else { (rows as usize - 1) * stride as usize + cols as usize };
    if cols > stride || span > len as usize {
        strided_out_of_range(rows, cols, stride, len);
    }
    span as u32
}

stop_fn! {
    /// Stops the kernel: a `rows × cols` view with rows `stride` apart does not fit in `len` elements.
    fn strided_out_of_range(rows: u32, cols: u32, stride: u32, len: u32) =>
        "a {rows} × {cols} matrix with rows {stride} elements apart does not fit a slice of {len} elements"
}

stop_fn! {
    /// Stops the kernel: `(row, col)` is outside the `rows × cols` view.
    fn element_out_of_range(row: u32, col: u32, rows: u32, cols: u32) =>
        "element ({row}, {col}) out of range for a {rows} × {cols} matrix"
}

impl<T: Copy> Slice<T> {
    /// This slice as a row-major `rows × cols` matrix (`rows·cols ≤ len`, checked once here).
    #[inline(always)]
    #[track_caller]
    pub fn matrix(self, rows: u32, cols: u32) -> Matrix<T> {
        let len = checked_matrix(rows, cols, self.len);
        Matrix { data: Slice { ptr: self.ptr, len, _marker: PhantomData }, rows, cols, stride: cols }
    }

    /// This slice as a row-major `rows × cols` matrix whose rows start `stride ≥ cols` elements
    /// apart (BLAS's leading dimension: element `(r, c)` at `r·stride + c`). Checked once here:
    /// `cols ≤ stride` and `(rows − 1)·stride + cols ≤ len`.
    #[inline(always)]
    #[track_caller]
    pub fn strided_matrix(self, rows: u32, cols: u32, stride: u32) -> Matrix<T> {
        let len = checked_strided_matrix(rows, cols, stride, self.len);
        Matrix { data: Slice { ptr: self.ptr, len, _marker: PhantomData }, rows, cols, stride }
    }
}

impl<T: Copy> SliceMut<T> {
    /// This slice as a writable row-major `rows × cols` matrix (`rows·cols ≤ len`, checked once
    /// here).
    #[inline(always)]
    #[track_caller]
    pub fn matrix(self, rows: u32, cols: u32) -> MatrixMut<T> {
        let len = checked_matrix(rows, cols, self.len);
        MatrixMut { data: SliceMut { ptr: self.ptr, len, _marker: PhantomData }, rows, cols, stride: cols }
    }

    /// This slice as a writable row-major `rows × cols` matrix with rows `stride ≥ cols` elements
    /// apart (see [`Slice::strided_matrix`]).
    #[inline(always)]
    #[track_caller]
    pub fn strided_matrix(self, rows: u32, cols: u32, stride: u32) -> MatrixMut<T> {
        let len = checked_strided_matrix(rows, cols, stride, self.len);
        MatrixMut { data: SliceMut { ptr: self.ptr, len, _marker: PhantomData }, rows, cols, stride }
    }
}

macro_rules! matrix_methods {
    ($name:ident, $slice:ident) => {
        impl<T: Copy> $name<T> {
            /// Number of rows.
            #[inline(always)]
            pub fn rows(&self) -> u32 {
                self.rows
            }

            /// Number of columns.
            #[inline(always)]
            pub fn cols(&self) -> u32 {
                self.cols
            }

            /// Elements from the start of one row to the next (`cols` unless made by
            /// `strided_matrix`).
            #[inline(always)]
            pub fn stride(&self) -> u32 {
                self.stride
            }

            /// Row `r` as a slice of `cols` elements (`r < rows`, checked).
            #[inline(always)]
            #[track_caller]
            pub fn row(&self, r: u32) -> $slice<T> {
                if r >= self.rows {
                    element_out_of_range(r, 0, self.rows, self.cols);
                }
                // SAFETY: row `r` lies inside the view, which lies inside the slice.
                $slice {
                    ptr: unsafe { self.data.ptr.add(r as usize * self.stride as usize) },
                    len: self.cols,
                    _marker: PhantomData,
                }
            }

            /// The elements from `(0, 0)` to `(rows − 1, cols − 1)`, row-major, as one slice (with
            /// the padding between rows of a strided view).
            #[inline(always)]
            pub fn as_slice(&self) -> Slice<T> {
                Slice { ptr: self.data.ptr, len: self.data.len, _marker: PhantomData }
            }

            /// The element offset of `(r, c)`, checked against the view's shape.
            #[inline(always)]
            #[track_caller]
            fn offset(&self, (r, c): (u32, u32)) -> usize {
                if r >= self.rows || c >= self.cols {
                    element_out_of_range(r, c, self.rows, self.cols);
                }
                r as usize * self.stride as usize + c as usize
            }
        }

        impl<T: Copy> Index<(u32, u32)> for $name<T> {
            type Output = T;
            /// Element `(row, col)`.
            #[inline(always)]
            #[track_caller]
            fn index(&self, at: (u32, u32)) -> &T {
                let i = self.offset(at);
                // SAFETY: inside the view, checked by `offset`.
                unsafe { &*self.data.ptr.add(i) }
            }
        }
    };
}

matrix_methods!(Matrix, Slice);
matrix_methods!(MatrixMut, SliceMut);

impl<T: Copy> IndexMut<(u32, u32)> for MatrixMut<T> {
    /// Element `(row, col)`, writable.
    #[inline(always)]
    #[track_caller]
    fn index_mut(&mut self, at: (u32, u32)) -> &mut T {
        let i = self.offset(at);
        // SAFETY: inside the view, checked by `offset`.
        unsafe { &mut *self.data.ptr.add(i) }
    }
}
