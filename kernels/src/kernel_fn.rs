//! Host-side view of a kernel: its PTX entry name and its argument tuple.

use core::ffi::c_void;

/// Launch descriptor that `#[kernel]` generates for each kernel (the kernel's name in upper case).
///
/// `A` is the tuple of the kernel's argument types, so a launcher that takes a `KernelFn<A>` and
/// an `A` cannot pass arguments of the wrong type or number.
pub struct KernelFn<A> {
    name: &'static str,
    run: fn(A),
}

impl<A: KernelArgs> KernelFn<A> {
    /// Used by `#[kernel]`; not meant to be called by hand.
    pub const fn new(name: &'static str, run: fn(A)) -> Self {
        Self { name, run }
    }

    /// The PTX entry name (the function's name; kernels are `#[no_mangle]`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the kernel body once, as the calling simulator thread.
    pub fn run_on_host(&self, args: A) {
        (self.run)(args)
    }
}

/// A kernel's argument tuple: `Copy` values whose addresses go to `cuLaunchKernel`.
///
/// # Safety
/// `param_ptrs` must return one pointer per tuple field, in order, each to that field.
pub unsafe trait KernelArgs: Copy {
    /// Pointers to each argument, the form `cuLaunchKernel` takes (`void **kernelParams`).
    fn param_ptrs(&self) -> Vec<*mut c_void>;
}

macro_rules! impl_kernel_args {
    ($($name:ident : $idx:tt),*) => {
        // SAFETY: one pointer per field, in field order.
        unsafe impl<$($name: Copy),*> KernelArgs for ($($name,)*) {
            fn param_ptrs(&self) -> Vec<*mut c_void> {
                vec![$(&self.$idx as *const $name as *mut c_void),*]
            }
        }
    };
}

impl_kernel_args!(A: 0);
impl_kernel_args!(A: 0, B: 1);
impl_kernel_args!(A: 0, B: 1, C: 2);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10);
impl_kernel_args!(A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11);
