//! `spiral`: the `spiral` command's image, from a configuration as its JSON file holds it.

use kernel_suite::spiral::{self, SpiralConfig};
use ndarray::{Array2, Array3};
use numpy::IntoPyArray;
use pykernels::devices::{Target, detached, target};
use pykernels::to_py;
use pyo3::prelude::*;
use rand::{SeedableRng, rngs::SmallRng};

/// The image of the configuration `config_json` (the fields of the command's JSON file, checked as
/// it checks them): `height × width` uint8 gray, or `height × width × 3` RGB with a palette.
#[pyfunction]
#[pyo3(signature = (config_json, *, device = None))]
pub fn _spiral<'py>(py: Python<'py>, config_json: &str, device: Option<&str>) -> PyResult<Bound<'py, PyAny>> {
    let config = SpiralConfig::from_json(config_json).map_err(to_py)?;
    let target = target(py, device)?;
    let gray = detached(py, || match target {
        Target::Gpu(d) | Target::Simulator(d) => spiral::spiral(d, &config),
        Target::Cpu => spiral::spiral_reference(&config),
    })?;
    let (h, w) = (config.height as usize, config.width as usize);
    Ok(match &config.palette {
        None => Array2::from_shape_vec((h, w), gray).expect("h·w pixels").into_pyarray(py).into_any(),
        Some(palette) => Array3::from_shape_vec((h, w, 3), spiral::colorize(&gray, palette))
            .expect("h·w·3 bytes")
            .into_pyarray(py)
            .into_any(),
    })
}

/// The configuration `spiral --new --seed SEED` draws for a `width × height` image, as JSON.
#[pyfunction]
pub fn _random_spiral_config(seed: u64, width: u32, height: u32) -> String {
    SpiralConfig::random(&mut SmallRng::seed_from_u64(seed), width, height).to_json()
}
