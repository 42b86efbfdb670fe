//! What the command-line programs (`host/src/bin/`) and benchmarks share: the `--device` choice
//! ([`cli`]), images ([`image_io`]), `.npy` files ([`npy`]) and charts ([`plot`]).
//! Re-exported at the crate root.

pub mod cli;
pub mod image_io;
pub mod npy;
pub mod plot;
