//! The kernels a project embeds: the PTX and cubin that `gpu-builder` compiled from its kernel
//! crate, which [`Device::gpu`](crate::Device::gpu) loads.
//!
//! The launch layer knows no kernels of its own: each project passes its [`EmbeddedKernels`] when
//! it opens a GPU, so one launch layer serves any kernel crate.
//!
//! ```ignore
//! // build.rs's `main`: compile the kernel crate `kernels/` and write the embedding.
//! gpu_builder::Builder::new("kernels").build_or_exit();
//!
//! // src/lib.rs: the kernels, embedded once, for `Device::gpu(0, &KERNELS)`.
//! pub static KERNELS: gpu_launch::EmbeddedKernels = gpu_launch::embedded_kernels!();
//! ```

/// Resources of one kernel in the embedded cubin, as `ptxas -v` reported them at build time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelResources {
    /// PTX entry name.
    pub name: &'static str,
    /// Registers per thread.
    pub registers: u32,
    /// Per-thread stack frame (local memory), bytes.
    pub stack_bytes: u32,
    /// Bytes stored to local memory because registers ran out.
    pub spill_store_bytes: u32,
    /// Bytes loaded back from local memory because registers ran out.
    pub spill_load_bytes: u32,
    /// Statically declared shared memory per block, bytes (dynamic shared memory is per launch).
    pub static_shared_bytes: u32,
}

/// A kernel crate as `gpu-builder` embedded it: a portable PTX module, an optional cubin for one
/// architecture, and what the build knows of its kernels. Made by
/// [`embedded_kernels!`](crate::embedded_kernels).
///
/// ```
/// use gpu_launch::{Device, EmbeddedKernels};
/// // What `embedded_kernels!()` writes from the build, here by hand: one kernel, no cubin.
/// static KERNELS: EmbeddedKernels = EmbeddedKernels {
///     ptx: ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry noop() { ret; }\n",
///     ptx_target: "sm_80",
///     min_compute_capability: 80,
///     cubin: None,
///     cubin_arch: 0,
///     declared_kernels: &["noop"],
///     hopper_kernels: &[],
///     ptxas_resources: &[],
/// };
/// assert_eq!(KERNELS.declared_kernels, ["noop"]);
/// assert!(KERNELS.resources("noop").is_none()); // no cubin, so no `ptxas` report
/// // With a GPU, `Device::gpu` loads the module; without one it says why, as an error.
/// match Device::gpu(0, &KERNELS) {
///     Ok(device) => println!("{}", device.describe()),
///     Err(why) => println!("no GPU: {why}"),
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedKernels {
    /// PTX of every kernel but the [`hopper_kernels`](Self::hopper_kernels), JIT-compiled by the
    /// driver of any GPU of at least [`min_compute_capability`](Self::min_compute_capability).
    pub ptx: &'static str,
    /// PTX `.target` of [`ptx`](Self::ptx), e.g. `sm_80`.
    pub ptx_target: &'static str,
    /// Oldest compute capability (major·10 + minor) that can run [`ptx`](Self::ptx).
    pub min_compute_capability: u32,
    /// Every kernel assembled by `ptxas` for [`cubin_arch`](Self::cubin_arch); `None` when the
    /// build had no `ptxas`.
    pub cubin: Option<&'static [u8]>,
    /// Compute capability of [`cubin`](Self::cubin) as major·10 + minor: the only one it loads on.
    pub cubin_arch: u32,
    /// Every kernel declared with `#[kernel]` in the kernel crate (generic kernels once per type,
    /// `name_TYPE`).
    pub declared_kernels: &'static [&'static str],
    /// Kernels only in the cubin (they use sm_90a instructions such as `wgmma`), not in the PTX.
    pub hopper_kernels: &'static [&'static str],
    /// `ptxas -v` resources per kernel of the cubin; empty without `ptxas`.
    pub ptxas_resources: &'static [KernelResources],
}

impl EmbeddedKernels {
    /// The `ptxas` resources of kernel `name`, if a cubin was built.
    pub fn resources(&self, name: &str) -> Option<&'static KernelResources> {
        self.ptxas_resources.iter().find(|r| r.name == name)
    }
}

/// The [`EmbeddedKernels`] that `gpu-builder` wrote for this package in its build script
/// (`$OUT_DIR/kernels_embed.rs`), as a constant expression.
#[macro_export]
macro_rules! embedded_kernels {
    () => {
        include!(concat!(env!("OUT_DIR"), "/kernels_embed.rs"))
    };
}
