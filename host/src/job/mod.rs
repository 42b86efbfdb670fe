//! The `svd` job, one module per role:
//!
//! * [`images`]: its data — the images in, the options, the results out — and their checks;
//! * [`input_queue`]: the queue the engines take images from, fed by decoders on a background
//!   pool (or with images in memory), screening out images that cannot be taken;
//! * [`cpu_engine`]: the CPU engine (faer, in parallel across images);
//! * [`gpu_engine`]: the GPU engine (batches factored by `svd_factor`, reconstructed and measured
//!   on the device, copied back into landing buffers), its batches sized by the device's free
//!   memory with [`footprint`] (what a batch takes of it);
//! * [`driver`]: what runs the job — its sources and shards, the engine on the CPU, one GPU or
//!   several, opened from [`driver::EngineOptions`], and the encoder threads;
//! * [`outputs`]: what it writes (images, `.npy` files, mosaics, the report and its journal);
//! * [`workload`]: the procedural benchmark images.
//!
//! Data flows `driver` → `input_queue` → `cpu_engine` | `gpu_engine` → `driver`'s encoders →
//! `outputs`; every module takes the types of [`images`]. The locks of the job are taken in one
//! way (a private `lock` module, which says why a poisoned lock is unreachable).

pub mod cpu_engine;
pub mod driver;
pub mod footprint;
pub mod gpu_engine;
pub mod images;
pub mod input_queue;
mod lock;
pub mod outputs;
pub mod workload;
