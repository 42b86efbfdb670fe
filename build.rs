//! Compiles the kernel crate `kernels/` to PTX and an sm_90a cubin and embeds them
//! ([`gpu_builder`]); the host library includes them as `kernel_suite::KERNELS`.

fn main() {
    gpu_builder::Builder::new("kernels").build_or_exit();
}
