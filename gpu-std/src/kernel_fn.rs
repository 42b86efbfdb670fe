//! Host-side view of a kernel: its PTX entry name, its argument tuple, and how the tuple maps to
//! the entry's parameters.

use core::ffi::c_void;

/// Launch descriptor that `#[kernel]` generates for each PTX entry (the entry's name in upper
/// case).
///
/// `A` is the tuple of the kernel's argument types, so a launcher that takes a `KernelFn<A>` and
/// an `A` cannot pass arguments of the wrong type or number.
pub struct KernelFn<A> {
    name: &'static str,
    run: fn(A),
    params: fn(&A) -> Vec<*mut c_void>,
}

impl<A: Copy> KernelFn<A> {
    /// Used by `#[kernel]`; not meant to be called by hand.
    ///
    /// # Safety
    /// `params` must return the address of each of the PTX entry's parameters, in order, inside
    /// the tuple it is given.
    pub const unsafe fn new(name: &'static str, run: fn(A), params: fn(&A) -> Vec<*mut c_void>) -> Self {
        Self { name, run, params }
    }

    /// The PTX entry name: the function's name, or `name_TYPE` for a generic kernel.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the kernel body once, as the calling simulator thread.
    pub fn run_on_host(&self, args: A) {
        (self.run)(args)
    }

    /// The addresses of the entry's parameters inside `args`, the form `cuLaunchKernel` takes
    /// (`void **kernelParams`): one per argument, two (pointer, length) per device slice. Valid
    /// while `args` is neither moved nor dropped.
    pub fn param_ptrs(&self, args: &A) -> Vec<*mut c_void> {
        (self.params)(args)
    }
}
