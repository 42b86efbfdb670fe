//! The `svd` job: its images, results and CPU engine ([`svd_job`]), its GPU engine and pipeline
//! ([`svd_batch`]), and the procedural benchmark images ([`workload`]). Re-exported at the crate
//! root.

pub mod svd_batch;
pub mod svd_job;
pub mod workload;
