//! The launch layer, what a template copies whole: devices and their queues, buffers and typed
//! launches ([`device`]), the embedded kernels ([`module`]), CUDA graphs ([`graph`]), the
//! `--profile` summary ([`profile`]) and the errors ([`error`]). Its modules are re-exported at the
//! crate root (`kernel_suite::device`, …).

pub(crate) mod dependent_launch;
pub mod device;
pub mod error;
pub mod graph;
pub mod module;
pub mod profile;
