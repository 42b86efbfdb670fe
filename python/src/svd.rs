//! `svd` and `reconstruct`: the `svd` command's exact truncated SVD of a batch of images and its
//! rank-k reconstructions, on NumPy arrays; `_svd_f64` and `_svd_f64_into` the float64 one of any
//! matrices (`matrix_svd`: the accurate pass, f64 factors).

use kernel_suite::matrix_svd::{self, MatrixFactors};
use kernel_suite::svd::{self, RankK, Variant};
use kernel_suite::svd_factor::{self, Triplets};
use ndarray::{Array2, Array3, Array4, ArrayView2, Axis, s};
use numpy::{IntoPyArray, PyArray2, PyArray3, PyArray4, PyReadonlyArray2, PyReadonlyArray3};
use pykernels::Dtype;
use pykernels::arrays::ForeignArray;
use pykernels::devices::{Target, check_output, detached, import_all, in_fitting_parts, target};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rayon::prelude::*;

/// The factors `svd` returns: `U` (`images × m × k`, float32), `S` (`images × k`, float64,
/// non-increasing), `Vᵀ` (`images × k × n`, float32).
type PyFactors<'py> = (Bound<'py, PyArray3<f32>>, Bound<'py, PyArray2<f64>>, Bound<'py, PyArray3<f32>>);

/// The leading `k` singular triplets of every image of `images` (`images × m × n`, float32): on
/// the GPU or in the simulator by the `svd` command's engine (`svd_factor`: subspace iteration on
/// the f64 Gram matrix, every triplet converged to the engine's tolerance), on the CPU by faer's
/// f64 thin SVD.
#[pyfunction]
#[pyo3(signature = (images, k, *, device = None))]
pub fn _svd<'py>(
    py: Python<'py>,
    images: PyReadonlyArray3<'py, f32>,
    k: usize,
    device: Option<&str>,
) -> PyResult<PyFactors<'py>> {
    let target = target(py, device)?;
    let images = images.as_array();
    let (count, m, n) = images.dim();
    if count == 0 || m == 0 || n == 0 {
        return Err(PyValueError::new_err(format!("cannot factor {count} images of {m} × {n}")));
    }
    if k == 0 || k > m.min(n) {
        return Err(PyValueError::new_err(format!(
            "k = {k} is outside 1..={} (min(rows, cols) of the images)",
            m.min(n)
        )));
    }
    let triplets = detached(py, || {
        let views: Vec<ArrayView2<f32>> = images.outer_iter().collect();
        match target {
            Target::Gpu(d) | Target::Simulator(d) => {
                in_fitting_parts(views.len(), |part| svd_factor::truncated_svd(d, &views[part], k))
            }
            Target::Cpu => views.par_iter().map(|image| cpu_triplets(*image, k)).collect(),
        }
    })?;
    let mut u = Array3::<f32>::zeros((count, m, k));
    let mut sv = Array2::<f64>::zeros((count, k));
    let mut vt = Array3::<f32>::zeros((count, k, n));
    for (i, t) in triplets.iter().enumerate() {
        u.index_axis_mut(Axis(0), i).assign(&t.u);
        sv.row_mut(i).assign(&ndarray::ArrayView1::from(&t.s[..k]));
        vt.index_axis_mut(Axis(0), i).assign(&t.vt);
    }
    Ok((u.into_pyarray(py), sv.into_pyarray(py), vt.into_pyarray(py)))
}

/// `_svd` on arrays of another library, in place: `images` (`count × m × n` float32) read, the
/// factors written into `u` (`count × m × k` float32), `s` (`count × k` float64) and `vt`
/// (`count × k × n` float32), after the work queued on the caller's `stream`. Returns when the
/// factors are written (the engine waits for the GPU once per iteration anyway).
#[pyfunction]
#[pyo3(signature = (images, u, s, vt, *, k, stream, device = None))]
#[allow(clippy::too_many_arguments)]
pub fn _svd_into(
    py: Python<'_>,
    images: &Bound<'_, PyAny>,
    u: &Bound<'_, PyAny>,
    s: &Bound<'_, PyAny>,
    vt: &Bound<'_, PyAny>,
    k: usize,
    stream: usize,
    device: Option<&str>,
) -> PyResult<()> {
    let (target, queue, arrays) = import_all(
        &[(images, "images"), (u, "U"), (s, "S"), (vt, "Vt")],
        &[Dtype::F32, Dtype::F64],
        stream,
        device,
    )?;
    let [images, u, s, vt] = &arrays[..] else { unreachable!("four arrays imported") };
    images.expect(3, Some(Dtype::F32))?;
    let (count, m, n) = (images.shape[0], images.shape[1], images.shape[2]);
    check_factors(("images", images), [(u, Dtype::F32), (s, Dtype::F64), (vt, Dtype::F32)], k)?;
    detached(py, || {
        // In parts that fit the GPU's free memory (the caller's library may hold most of it).
        in_fitting_parts(count, |part| {
            let (first, images_in_part) = (part.start, part.len());
            // SAFETY: float32/float64 arrays of the checked shapes in the target's memory, not
            // overlapping one another; each part reads and writes its own images.
            unsafe {
                let pixels = images.view().view(first * m * n..part.end * m * n)?;
                let f = svd_factor::factor_pixels(target, &queue, pixels, (m, n), images_in_part, k)?;
                let q = target.queue();
                target.copy_view(
                    q,
                    f.u.view(..)?,
                    u.view_mut().view_mut(first * m * k..part.end * m * k)?,
                )?;
                target.copy_view(
                    q,
                    f.vt.view(..)?,
                    vt.view_mut().view_mut(first * k * n..part.end * k * n)?,
                )?;
                let values = f.singular_values.concat();
                let mut values_buffer = target.alloc_temporary::<f64>(q, values.len())?;
                target.upload_into(&mut values_buffer, &values)?;
                let values = values_buffer;
                target.copy_view(q, values.view(..)?, s.view_mut().view_mut(first * k..part.end * k)?)?;
                target.synchronize()?;
            }
            Ok(Vec::<()>::new())
        })
        .map(drop)
    })
}

/// The f64 factors `_svd_f64` returns: `U` (`count × m × k`), `S` (`count × k`), `Vᵀ`
/// (`count × k × n`).
type PyFactors64<'py> = (Bound<'py, PyArray3<f64>>, Bound<'py, PyArray2<f64>>, Bound<'py, PyArray3<f64>>);

/// The leading `k` singular triplets of every matrix of `a` (`count × m × n`, float64), in float64
/// and to float64 accuracy (`matrix_svd::truncated_svd`): on the GPU or in the simulator by the
/// Gram iteration and its accurate pass (in parts that fit the GPU's free memory), on the CPU by
/// faer's thin SVD.
#[pyfunction]
#[pyo3(signature = (a, k, *, device = None))]
pub fn _svd_f64<'py>(
    py: Python<'py>,
    a: PyReadonlyArray3<'py, f64>,
    k: usize,
    device: Option<&str>,
) -> PyResult<PyFactors64<'py>> {
    let target = target(py, device)?;
    let a = a.as_array();
    let (count, m, n) = a.dim();
    if count == 0 {
        return Err(PyValueError::new_err(format!("cannot factor an empty batch of {m} × {n} matrices")));
    }
    let factors = detached(py, || {
        let views: Vec<ArrayView2<f64>> = a.outer_iter().collect();
        match target {
            Target::Gpu(d) | Target::Simulator(d) => {
                in_fitting_parts(views.len(), |part| matrix_svd::truncated_svd(Some(d), &views[part], k))
            }
            Target::Cpu => matrix_svd::truncated_svd(None, &views, k),
        }
    })?;
    let (u, sv, vt) = stacked(&factors, (m, n), k);
    Ok((u.into_pyarray(py), sv.into_pyarray(py), vt.into_pyarray(py)))
}

/// `_svd_f64` on arrays of another library, in place: `a` (`count × m × n`, float32 or float64)
/// read after the work queued on the caller's `stream` and widened to float64 on the device, the
/// float64 factors written into `u` (`count × m × k`), `s` (`count × k`) and `vt`
/// (`count × k × n`). Returns when they are written.
#[pyfunction]
#[pyo3(signature = (a, u, s, vt, *, k, stream, device = None))]
#[allow(clippy::too_many_arguments)]
pub fn _svd_f64_into(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    u: &Bound<'_, PyAny>,
    s: &Bound<'_, PyAny>,
    vt: &Bound<'_, PyAny>,
    k: usize,
    stream: usize,
    device: Option<&str>,
) -> PyResult<()> {
    let (target, queue, arrays) =
        import_all(&[(a, "A"), (u, "U"), (s, "S"), (vt, "Vt")], &[Dtype::F32, Dtype::F64], stream, device)?;
    let [a, u, s, vt] = &arrays[..] else { unreachable!("four arrays imported") };
    a.expect(3, None)?;
    let (count, m, n) = (a.shape[0], a.shape[1], a.shape[2]);
    check_factors(("matrices", a), [(u, Dtype::F64), (s, Dtype::F64), (vt, Dtype::F64)], k)?;
    detached(py, || {
        // In parts that fit the GPU's free memory (the caller's library may hold most of it).
        in_fitting_parts(count, |part| {
            let (first, end) = (part.start, part.end);
            // float64 matrices are read where they are; float32 ones widened into a temporary.
            let mut widened = None;
            // SAFETY: arrays of the checked shapes and dtypes in the target's memory, not
            // overlapping one another; each part reads and writes its own matrices; the caller's
            // arrays, `widened` and the uploaded factors live until the synchronisation below.
            unsafe {
                let values = first * m * n..end * m * n;
                let matrices = if a.dtype == Dtype::F64 {
                    a.view::<f64>().view(values)?
                } else {
                    let into = widened.insert(target.alloc::<f64>(part.len() * m * n)?);
                    svd_factor::launch_f32_to_f64(
                        target,
                        &queue,
                        a.view::<f32>().view(values)?,
                        into.view_mut(..)?,
                    )?;
                    into.view(..)?
                };
                target.queue_wait(target.queue(), target.mark_on(&queue)?)?;
                let factors = matrix_svd::truncated_svd_on_device(target, matrices, (m, n), part.len(), k)?;
                let q = target.queue();
                let (fu, fs, fvt) = (&factors.u, target.upload(&factors.s.concat())?, &factors.vt);
                target.copy_view(q, fu.view(..)?, u.view_mut().view_mut(first * m * k..end * m * k)?)?;
                target.copy_view(q, fs.view(..)?, s.view_mut().view_mut(first * k..end * k)?)?;
                target.copy_view(q, fvt.view(..)?, vt.view_mut().view_mut(first * k * n..end * k * n)?)?;
                target.synchronize()?;
            }
            Ok(Vec::<()>::new())
        })
        .map(drop)
    })
}

/// Checks the rank `k` against the input (`count × m × n`, `what` naming its matrices in the
/// message) and its factors' outputs `[U, S, Vt]`: each of its dtype, holding `count` matrices of
/// `m × k`, `k` and `k × n`, its shape any whose last sides are those (a batch of any leading
/// dimensions: `(count, rows, cols)`, `(…, rows, cols)`, or `S`'s `(…, k)`), none overlapping
/// another or the input.
fn check_factors(
    (what, input): (&str, &ForeignArray),
    outputs: [(&ForeignArray, Dtype); 3],
    k: usize,
) -> PyResult<()> {
    let (count, m, n) = (input.shape[0], input.shape[1], input.shape[2]);
    if count == 0 || m == 0 || n == 0 || k == 0 || k > m.min(n) {
        return Err(PyValueError::new_err(format!(
            "{count} {what} of {m} × {n} with k = {k}: k must lie in 1..=min(rows, cols)"
        )));
    }
    for ((array, dtype), trailing) in outputs.iter().zip([&[m, k][..], &[k], &[k, n]]) {
        if array.dtype != *dtype
            || !array.shape.ends_with(trailing)
            || array.len() != count * trailing.iter().product::<usize>()
        {
            return Err(PyValueError::new_err(format!(
                "{} is {} of shape {:?}: expected {dtype} of {count} matrices of {trailing:?}",
                array.name, array.dtype, array.shape
            )));
        }
    }
    let [(u, _), (s, _), (vt, _)] = outputs;
    check_output(u, &[input, s, vt])?;
    check_output(s, &[input, vt])?;
    check_output(vt, &[input])
}

/// The factors of a batch stacked: `U` (`count × m × k`), `S` (`count × k`), `Vᵀ` (`count × k × n`).
fn stacked(
    factors: &[MatrixFactors],
    (m, n): (usize, usize),
    k: usize,
) -> (Array3<f64>, Array2<f64>, Array3<f64>) {
    let count = factors.len();
    let mut u = Array3::<f64>::zeros((count, m, k));
    let mut sv = Array2::<f64>::zeros((count, k));
    let mut vt = Array3::<f64>::zeros((count, k, n));
    for (i, f) in factors.iter().enumerate() {
        u.index_axis_mut(Axis(0), i).assign(&f.u);
        sv.row_mut(i).assign(&ndarray::ArrayView1::from(&f.s[..]));
        vt.index_axis_mut(Axis(0), i).assign(&f.vt);
    }
    (u, sv, vt)
}

/// `_reconstruct` on arrays of another library, in place: `u` (`count × m × k`), `s` (`count × k`)
/// and `vt` (`count × k × n`) read, `out` (`count × ranks × m × n`) written, all float32, one
/// batched launch per rank queued on the caller's `stream` without waiting.
#[pyfunction]
#[pyo3(signature = (u, s, vt, out, *, ranks, stream, device = None))]
#[allow(clippy::too_many_arguments)]
pub fn _reconstruct_into(
    py: Python<'_>,
    u: &Bound<'_, PyAny>,
    s: &Bound<'_, PyAny>,
    vt: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    ranks: Vec<usize>,
    stream: usize,
    device: Option<&str>,
) -> PyResult<()> {
    let (target, queue, arrays) = import_all(
        &[(u, "U"), (s, "S"), (vt, "Vt"), (out, "out")],
        &[Dtype::F32, Dtype::F64],
        stream,
        device,
    )?;
    let [u, s, vt, out] = &arrays[..] else { unreachable!("four arrays imported") };
    u.expect(3, Some(Dtype::F32))?;
    let (count, m, k) = (u.shape[0], u.shape[1], u.shape[2]);
    s.expect(2, Some(Dtype::F32))?;
    vt.expect(3, Some(Dtype::F32))?;
    let n = vt.shape[2];
    if s.shape != [count, k] || vt.shape[..2] != [count, k] {
        return Err(PyValueError::new_err(format!(
            "U is {:?}, S {:?}, Vt {:?}: expected (images, m, k), (images, k), (images, k, n)",
            u.shape, s.shape, vt.shape
        )));
    }
    out.expect(4, Some(Dtype::F32))?;
    if out.shape != [count, ranks.len(), m, n] {
        return Err(PyValueError::new_err(format!(
            "out has shape {:?}, expected {:?}",
            out.shape,
            [count, ranks.len(), m, n]
        )));
    }
    if let Some(&r) = ranks.iter().find(|&&r| r == 0 || r > k) {
        return Err(PyValueError::new_err(format!("rank {r} is outside 1..={k} (the factors' k)")));
    }
    if out.len() > u32::MAX as usize || u.len() > u32::MAX as usize || vt.len() > u32::MAX as usize {
        return Err(PyValueError::new_err("the batch exceeds the kernels' 32-bit indexing: split it"));
    }
    check_output(out, &[u, s, vt])?;
    let image = m * n;
    let strides = kernels::svd::Batch {
        u: (m * k) as u32,
        s: k as u32,
        vt: (k * n) as u32,
        out: (ranks.len() * image) as u32,
    };
    let shape = svd::BatchShape { images: count, ldu: k, strides };
    detached(py, || {
        // SAFETY: float32 arrays of the checked shapes in the target's memory; `out` overlaps no
        // operand, and each launch writes its rank's images only.
        unsafe {
            let (u, s, vt, mut out) = (u.view(), s.view(), vt.view(), out.view_mut());
            for (j, &rank) in ranks.iter().enumerate() {
                let views = svd::ReconstructViews { u, s, vt, out: out.view_mut(j * image..)? };
                svd::launch_reconstruct_batch(
                    target,
                    &queue,
                    Variant::Regtiled,
                    16,
                    views,
                    (m, n, rank),
                    shape,
                )?;
            }
            Ok(())
        }
    })
}

/// The leading `k` triplets of faer's thin SVD.
fn cpu_triplets(image: ArrayView2<f32>, k: usize) -> kernel_suite::Result<Triplets> {
    let f = svd::thin_svd(image)?;
    Ok(Triplets {
        u: f.u.slice(s![.., ..k]).mapv(|v| v as f32),
        s: f.s[..k].to_vec(),
        vt: f.vt.slice(s![..k, ..]).mapv(|v| v as f32),
        frobenius_norm: svd::metrics::energy(&f.s).sqrt(),
    })
}

/// `U[:, :r]·diag(S[:r])·Vᵀ[:r, :]` of every image for every rank `r` of `ranks`:
/// `images × ranks × m × n`, float32. On the GPU or in the simulator by the `svd` command's
/// reconstruction kernel (`regtiled`, f32 with f32 accumulation), on the CPU in f64.
#[pyfunction]
#[pyo3(signature = (u, s, vt, ranks, *, device = None))]
pub fn _reconstruct<'py>(
    py: Python<'py>,
    u: PyReadonlyArray3<'py, f32>,
    s: PyReadonlyArray2<'py, f32>,
    vt: PyReadonlyArray3<'py, f32>,
    ranks: Vec<usize>,
    device: Option<&str>,
) -> PyResult<Bound<'py, PyArray4<f32>>> {
    let target = target(py, device)?;
    let (u, s, vt) = (u.as_array(), s.as_array(), vt.as_array());
    let (count, m, k) = u.dim();
    let n = vt.dim().2;
    if s.dim() != (count, k) || vt.dim().0 != count || vt.dim().1 != k {
        return Err(PyValueError::new_err(format!(
            "U is {:?}, S {:?}, Vt {:?}: expected (images, m, k), (images, k), (images, k, n)",
            u.dim(),
            s.dim(),
            vt.dim()
        )));
    }
    if let Some(&r) = ranks.iter().find(|&&r| r == 0 || r > k) {
        return Err(PyValueError::new_err(format!("rank {r} is outside 1..={k} (the factors' k)")));
    }
    let out = detached(py, || -> kernel_suite::Result<Array4<f32>> {
        let mut out = Array4::<f32>::zeros((count, ranks.len(), m, n));
        for i in 0..count {
            for (j, &r) in ranks.iter().enumerate() {
                let op = RankK {
                    u: u.slice(s![i, .., ..r]).to_owned(),
                    s: s.slice(s![i, ..r]).to_vec(),
                    vt: vt.slice(s![i, ..r, ..]).to_owned(),
                };
                let image = match target {
                    Target::Gpu(d) | Target::Simulator(d) => {
                        svd::reconstruct(d, &op, Variant::Regtiled, 16)?.0
                    }
                    Target::Cpu => svd::reconstruct_reference_f32(&op).mapv(|v| v as f32),
                };
                out.slice_mut(s![i, j, .., ..]).assign(&image);
            }
        }
        Ok(out)
    })?;
    Ok(out.into_pyarray(py))
}
