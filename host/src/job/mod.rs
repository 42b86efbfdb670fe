//! The `svd` job: its images, results and CPU engine ([`svd_job`]), its GPU engine and pipeline
//! ([`svd_batch`]), what runs it — sources, engines on one or several GPUs, encoder threads
//! ([`svd_engine`]) — what it writes ([`svd_outputs`]), and the procedural benchmark images
//! ([`workload`]). Re-exported at the crate root.

pub mod svd_batch;
pub mod svd_engine;
pub mod svd_job;
pub mod svd_outputs;
pub mod workload;
