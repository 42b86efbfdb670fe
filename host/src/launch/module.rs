//! The kernels the builder (`build.rs`) compiled and embedded in this library.

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

include!(concat!(env!("OUT_DIR"), "/kernels_embed.rs"));

/// The `ptxas` resources of kernel `name`, if a cubin was built.
pub fn resources(name: &str) -> Option<&'static KernelResources> {
    PTXAS_RESOURCES.iter().find(|r| r.name == name)
}
