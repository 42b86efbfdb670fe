//! One module per kernel family, each a safe wrapper of its kernels (`kernels/src/FAMILY.rs`) with
//! its CPU reference: the examples [`saxpy`], [`histogram`], [`reduce`], [`scan`], [`transpose`],
//! and [`conv`], [`lombscargle`], [`spiral`], [`svd`] (the reconstructions), [`svd_factor`]
//! (the SVD itself) and [`matrix_svd`] (its exact truncated SVD of any matrix). Re-exported at the crate root (`kernel_suite::conv`, …).

pub mod conv;
pub mod histogram;
pub mod lombscargle;
pub mod matrix_svd;
pub mod reduce;
pub mod saxpy;
pub mod scan;
pub mod spiral;
pub mod svd;
pub mod svd_factor;
pub mod transpose;
