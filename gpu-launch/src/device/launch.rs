//! Kernel launches: the typed argument lists ([`KernelArg`], [`IntoKernelArgs`]) and the launch
//! calls, on a GPU through `cust` or in the simulator.

use super::{Buffer, BufferView, BufferViewMut, Device, Element, Inner, Phase, Queue, mixed_devices};
use crate::error::{Error, Result, cuda, raw};
use crate::profile::Work;
use gpu_std::sim::LaunchConfig;
use gpu_std::{KernelFn, Slice, SliceMut};

impl Device {
    /// Launches `kernel` over `cfg` with `args`. On a GPU it is queued on the device's queue
    /// (asynchronous); in the simulator it has finished when this returns.
    ///
    /// `args` is the kernel's argument tuple, with `&Buffer<T>` (or `&mut Buffer<T>`) for each
    /// `&[T]` parameter and `&mut Buffer<T>` for each `&mut [T]` ([`KernelArg`]): the slice
    /// carries the buffer's length. A buffer longer than `u32::MAX` elements is refused.
    ///
    /// # Safety
    /// The kernel's documented preconditions hold for `cfg` and `args` (launch shape, counts,
    /// which thread writes what). Every raw pointer in `args` must come from a [`Buffer`] of this
    /// device (or be null where the kernel allows it) and be valid for every element the kernel
    /// accesses with these arguments; slices from buffers are valid by construction.
    pub unsafe fn launch<A: Copy>(
        &self,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_on(&self.queue, kernel, cfg, args) }
    }

    /// [`Device::launch`] on another queue.
    ///
    /// # Safety
    /// As for [`Device::launch`].
    pub unsafe fn launch_on<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_counted(queue, kernel, cfg, args, None) }
    }

    /// [`Device::launch_on`], telling the profiler the launch's useful [`Work`] (bytes and flops)
    /// so that the profile reports achieved GB/s and GFLOP/s.
    ///
    /// # Safety
    /// As for [`Device::launch`].
    pub unsafe fn launch_counted<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
        work: Option<Work>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_with(queue, kernel, cfg, args, work, LaunchKind::Plain) }
    }

    /// [`Device::launch_counted`] as a programmatic dependent launch (sm_90 and later): the
    /// kernel's blocks may start, and run what comes before their
    /// [`grid_dependency_synchronize`](gpu_std::thread::grid_dependency_synchronize), while the
    /// kernel queued before it on `queue` is finishing. Saves the gap between two kernels where
    /// the second can only use the first's results. While profiling, whose events go between
    /// the kernels, and in the simulator, an ordinary launch.
    ///
    /// # Safety
    /// As for [`Device::launch`]; in addition, the kernel calls `grid_dependency_synchronize`
    /// before it touches memory that the kernel before it writes, or writes memory that kernel
    /// reads.
    pub unsafe fn launch_dependent<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
        work: Option<Work>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_with(queue, kernel, cfg, args, work, LaunchKind::Dependent) }
    }

    /// [`Device::launch`] with every block resident at once (CUDA's cooperative launch; in the
    /// simulator every block on an OS thread of its own), for kernels whose blocks wait for each
    /// other at a [`GridBarrier`](gpu_std::grid::GridBarrier). A grid larger than the GPU holds
    /// at once is refused with an error rather than left to hang.
    ///
    /// # Safety
    /// As for [`Device::launch`].
    pub unsafe fn launch_cooperative<A: Copy>(
        &self,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.launch_with(&self.queue, kernel, cfg, args, None, LaunchKind::Cooperative) }
    }

    /// [`Device::launch_counted`], [`Device::launch_dependent`] or
    /// [`Device::launch_cooperative`], as `kind` says.
    ///
    /// # Safety
    /// As for the launch `kind` names.
    unsafe fn launch_with<A: Copy>(
        &self,
        queue: &Queue,
        kernel: &KernelFn<A>,
        cfg: LaunchConfig,
        args: impl IntoKernelArgs<A>,
        work: Option<Work>,
        kind: LaunchKind,
    ) -> Result<()> {
        let name = kernel.name();
        cfg.validate().map_err(|e| Error::InvalidLaunch { kernel: name, message: e.0 })?;
        let args =
            args.into_kernel_args().map_err(|message| Error::InvalidLaunch { kernel: name, message })?;
        self.last_kernel.set(name);
        match (&self.inner, &queue.stream) {
            (Inner::Gpu(g), Some(stream)) => {
                let _phase = Phase::new(name);
                // A kernel's first lookup loads it (lazy module loading): a host cost in profiles.
                let function = self.time_host("kernel lookup (cuModuleGetFunction, cuFuncSetAttribute)", || {
                    let function = g.module.get_function(name).map_err(cuda("cuModuleGetFunction"))?;
                    if cfg.shared_bytes > 48 * 1024 {
                        // Above 48 KiB a kernel must opt in to more dynamic shared memory.
                        // SAFETY: a valid function handle and attribute.
                        raw("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", unsafe {
                            cust::sys::cuFuncSetAttribute(
                                function.to_raw(),
                                cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                cfg.shared_bytes as i32,
                            )
                        })?;
                    }
                    Ok::<_, Error>(function)
                })?;
                let mut params = kernel.param_ptrs(&args);
                let (grid, block) = (cfg.grid, cfg.block);
                let start = self.profiler.get().map(|p| p.start(stream)).transpose()?;
                // SAFETY: `params` matches the kernel's signature by construction of `KernelFn<A>`;
                // pointer validity (and, for a dependent launch, the kernel's wait) is the
                // caller's contract.
                if kind == LaunchKind::Cooperative {
                    // SAFETY: as above; the driver refuses a grid whose blocks cannot all be
                    // resident at once.
                    raw("cuLaunchCooperativeKernel", unsafe {
                        cust::sys::cuLaunchCooperativeKernel(
                            function.to_raw(),
                            grid.x,
                            grid.y,
                            grid.z,
                            block.x,
                            block.y,
                            block.z,
                            cfg.shared_bytes,
                            stream.as_inner(),
                            params.as_mut_ptr(),
                        )
                    })
                    .map_err(|source| Error::InvalidLaunch {
                        kernel: name,
                        message: format!("cooperative launch of grid {grid}, block {block}: {source}"),
                    })?;
                    if let (Some(p), Some(start)) = (self.profiler.get(), start) {
                        p.kernel(stream, start, &function, name, cfg, work)?;
                    }
                    return Ok(());
                }
                let dependent_launch = (kind == LaunchKind::Dependent && start.is_none())
                    .then(|| unsafe {
                        crate::dependent_launch::launch(
                            function.to_raw(),
                            stream.as_inner(),
                            [grid.x, grid.y, grid.z],
                            [block.x, block.y, block.z],
                            cfg.shared_bytes,
                            &mut params,
                        )
                    })
                    .flatten();
                match dependent_launch {
                    Some(result) => raw("cuLaunchKernelEx", result)?,
                    None => unsafe {
                        stream.launch(
                            &function,
                            (grid.x, grid.y, grid.z),
                            (block.x, block.y, block.z),
                            cfg.shared_bytes,
                            &params,
                        )
                    }
                    .map_err(|source| Error::Kernel { kernel: name, source })?,
                }
                if let (Some(p), Some(start)) = (self.profiler.get(), start) {
                    p.kernel(stream, start, &function, name, cfg, work)?;
                }
                Ok(())
            }
            (Inner::Simulator, None) => {
                // A simulated thread's fault unwinds out of the launch as one panic with the
                // simulator's report; it becomes an error, as a GPU's trap does.
                // SAFETY: forwarded from the caller.
                let launch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
                    if kind == LaunchKind::Cooperative {
                        gpu_std::sim::launch_cooperative(kernel, cfg, args)
                    } else {
                        gpu_std::sim::launch(kernel, cfg, args)
                    }
                }));
                match launch {
                    Ok(launched) => launched.map_err(|e| Error::InvalidLaunch { kernel: name, message: e.0 }),
                    Err(panic) => Err(Error::SimulatedKernel { kernel: name, message: panic_text(panic) }),
                }
            }
            _ => Err(mixed_devices()),
        }
    }
}

/// How a launch is made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LaunchKind {
    /// `cuLaunchKernel`.
    Plain,
    /// A programmatic dependent launch ([`Device::launch_dependent`]).
    Dependent,
    /// `cuLaunchCooperativeKernel` ([`Device::launch_cooperative`]).
    Cooperative,
}

/// The text of a panic's payload (a formatted message or a literal).
fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    match panic.downcast::<String>() {
        Ok(text) => *text,
        Err(panic) => panic.downcast_ref::<&str>().map_or("a kernel panicked", |text| text).to_string(),
    }
}

/// A host value that becomes one kernel argument of type `A`: the value itself (scalars, `Copy`
/// structs, raw pointers), or a buffer for a device slice — `&Buffer<T>` or `&mut Buffer<T>` for a
/// [`Slice<T>`] (`&[T]` in the kernel), only `&mut Buffer<T>` for a [`SliceMut<T>`]
/// (`&mut [T]`), so passing a read-only buffer where the kernel writes does not compile.
pub trait KernelArg<A> {
    /// The argument, or why it cannot be one (a buffer longer than a slice's `u32` length).
    fn kernel_arg(self) -> std::result::Result<A, String>;
}

impl<T: Copy> KernelArg<T> for T {
    fn kernel_arg(self) -> std::result::Result<T, String> {
        Ok(self)
    }
}

/// A buffer's length as a device slice's `u32` length.
fn slice_len(len: usize) -> std::result::Result<u32, String> {
    u32::try_from(len)
        .map_err(|_| format!("a buffer of {len} elements is longer than a kernel slice (u32::MAX elements)"))
}

impl<T: Element> KernelArg<Slice<T>> for &Buffer<T> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        // SAFETY: the buffer holds `len` elements and outlives the launch (the borrow is held
        // until the launch call returns; the caller of the launch keeps the buffer until the work
        // completes, as for every launch).
        Ok(unsafe { Slice::from_raw_parts(self.as_kernel_ptr(), slice_len(self.len())?) })
    }
}

impl<T: Element> KernelArg<Slice<T>> for &mut Buffer<T> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        (&*self).kernel_arg()
    }
}

impl<T: Element> KernelArg<SliceMut<T>> for &mut Buffer<T> {
    fn kernel_arg(self) -> std::result::Result<SliceMut<T>, String> {
        let len = slice_len(self.len())?;
        // SAFETY: as for `Slice`; the exclusive borrow keeps other arguments from aliasing it.
        Ok(unsafe { SliceMut::from_raw_parts(self.as_kernel_mut_ptr(), len) })
    }
}

impl<T: Element> KernelArg<Slice<T>> for BufferView<'_, T> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        // SAFETY: the view lies inside its buffer, which the borrow keeps alive, as for `&Buffer`.
        Ok(unsafe { Slice::from_raw_parts(self.ptr, slice_len(self.len)?) })
    }
}

impl<T: Element> KernelArg<SliceMut<T>> for BufferViewMut<'_, T> {
    fn kernel_arg(self) -> std::result::Result<SliceMut<T>, String> {
        // SAFETY: as for `BufferView`; the exclusive borrow keeps other arguments from aliasing it
        // (but for views made by the unsafe `aliased_view`).
        Ok(unsafe { SliceMut::from_raw_parts(self.ptr, slice_len(self.len)?) })
    }
}

/// An optional input: `None` passes an empty slice, which kernels with optional inputs read as
/// "absent".
impl<T: Element, V: KernelArg<Slice<T>>> KernelArg<Slice<T>> for Option<V> {
    fn kernel_arg(self) -> std::result::Result<Slice<T>, String> {
        match self {
            Some(v) => v.kernel_arg(),
            // SAFETY: an empty slice reads no memory.
            None => Ok(unsafe { Slice::from_raw_parts(std::ptr::null(), 0) }),
        }
    }
}

/// What [`Device::launch`] takes for a kernel whose argument tuple is `A`: a tuple of the same
/// length whose elements are each a [`KernelArg`] of the kernel's argument.
pub trait IntoKernelArgs<A> {
    /// The kernel's argument tuple.
    fn into_kernel_args(self) -> std::result::Result<A, String>;
}

macro_rules! impl_into_kernel_args {
    ($($arg:ident $value:ident : $idx:tt),*) => {
        impl<$($arg, $value: KernelArg<$arg>),*> IntoKernelArgs<($($arg,)*)> for ($($value,)*) {
            fn into_kernel_args(self) -> std::result::Result<($($arg,)*), String> {
                Ok(($(self.$idx.kernel_arg()?,)*))
            }
        }
    };
}

impl_into_kernel_args!(A0 P0: 0);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7);
impl_into_kernel_args!(A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8);
impl_into_kernel_args!(
    A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8, A9 P9: 9
);
impl_into_kernel_args!(
    A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8, A9 P9: 9,
    A10 P10: 10
);
impl_into_kernel_args!(
    A0 P0: 0, A1 P1: 1, A2 P2: 2, A3 P3: 3, A4 P4: 4, A5 P5: 5, A6 P6: 6, A7 P7: 7, A8 P8: 8, A9 P9: 9,
    A10 P10: 10, A11 P11: 11
);
