//! The forms a kernel is written in: device slices (bounds-checked, sub-slices), generic kernels
//! (one entry per type), and the shared-memory allocator with the layout the host sizes launches
//! by. Kernels defined here run in the simulator only (test crates are not compiled for the GPU).

mod common;

use gpu_std::{Float, Slice, SliceMut, kernel, shared, thread};
use kernel_suite::{Device, Dim3, LaunchConfig};

/// `y[i] = x[i + shift]` for every `i < y.len()`: reads past the end of `x` when `shift` is too large.
#[kernel]
pub fn shifted_copy(x: &[f32], shift: u32, y: &mut [f32]) {
    let i = thread::index_1d() as usize;
    if i < y.len() {
        y[i] = x[i + shift as usize];
    }
}

/// `y[i] += x[i]`, with the device slice types written out instead of `&[T]` / `&mut [T]`.
#[kernel]
pub fn add_into(x: Slice<f32>, mut y: SliceMut<f32>) {
    let i = thread::index_1d() as usize;
    if let Some(v) = x.get(i)
        && i < y.len()
    {
        y[i] += v;
    }
}

/// `out[i] = sqrt(|a·x[i] + y[i]|)` computed in `F`.
#[kernel(f32, f64)]
pub fn scaled_root<F: Float>(a: F, x: &[F], y: &[F], out: &mut [F]) {
    let i = thread::index_1d() as usize;
    if i < out.len() {
        out[i] = a.mul_add(x[i], y[i]).abs().sqrt();
    }
}

/// One thread per row of the row-major `rows × cols` matrix `x`: `sums[r]` = the sum of row `r`
/// plus its last element again, through a sub-slice, `tail` and `get`.
#[kernel]
pub fn row_sums(x: &[f64], cols: u32, sums: &mut [f64]) {
    let r = thread::index_1d() as usize;
    if r >= sums.len() {
        return;
    }
    let cols = cols as usize;
    let row = x.sub(r * cols, cols);
    let mut acc = 0.0;
    for j in 0..row.len() {
        acc += row[j];
    }
    let past_end = row.get(cols).unwrap_or(0.0);
    sums[r] = acc + row.tail(cols - 1)[0] + past_end;
}

/// `out[r, c] = x[r, c] + 10·x[r, (c + 1) mod cols]` over row-major `rows × cols` views, through
/// `(row, col)` indexing and `row(r)`; `extra_rows` makes the output view taller than the launch
/// checked, to show the one check a view makes.
#[kernel]
pub fn matrix_neighbours(x: &[f32], rows: u32, cols: u32, extra_rows: u32, out: &mut [f32]) {
    let (x, mut out) = (x.matrix(rows, cols), out.matrix(rows + extra_rows, cols));
    let (c, r) = thread::index_2d();
    if r < rows && c < cols {
        let next = x.row(r)[((c + 1) % cols) as usize];
        out[(r, c)] = x[(r, c)] + 10.0 * next;
    }
}

/// `out[(c, r)] = x[(r, c)]` (`out` is `cols × rows`) for the `rows × cols` matrix whose rows lie
/// `ld` elements apart in `x`, one thread per element of `x`'s view (x: column, y: row).
#[kernel]
pub fn transpose_strided(x: &[f32], rows: u32, cols: u32, ld: u32, out: &mut [f32]) {
    let (x, mut out) = (x.strided_matrix(rows, cols, ld), out.matrix(cols, rows));
    let (c, r) = thread::index_2d();
    if r < rows && c < cols {
        out[(c, r)] = x[(r, c)] + x.row(r)[0];
    }
}

/// The layout of [`shared_arrays`]: `n` bytes, then 2 f64, then 3 u16.
const fn probe_layout(n: usize) -> shared::Layout {
    shared::Layout::new().array::<u8>(n).array::<f64>(2).array::<u16>(3)
}

/// Allocates [`probe_layout`]`(n)`, fills every element from one thread per element, and writes
/// back each array's byte offset and the sum of what each thread reads back.
#[kernel]
pub fn shared_arrays(n: u32, offsets: &mut [u32], sums: &mut [f64]) {
    let mut smem = shared::Allocator::new();
    let bytes = smem.array::<u8>(n as usize);
    let wide = smem.array::<f64>(2);
    let short = smem.array::<u16>(3);
    let t = thread::thread_idx_x() as usize;
    // SAFETY: every index is below its array's length; each element is written by one thread
    // before the barrier and read after it.
    unsafe {
        if t < bytes.len() {
            bytes.write(t, t as u8);
        }
        if t < wide.len() {
            wide.write(t, 0.5 + t as f64);
        }
        if t < short.len() {
            short.write(t, 1000 + t as u16);
        }
        thread::sync_threads();
        if t == 0 {
            let base = bytes.as_ptr() as usize;
            offsets[0] = (wide.as_ptr() as usize - base) as u32;
            offsets[1] = (short.as_ptr() as usize - base) as u32;
            offsets[2] = smem.layout().bytes_u32();
            let mut total = 0.0;
            for i in 0..bytes.len() {
                total += bytes.read(i) as f64;
            }
            sums[0] = total;
            sums[1] = wide.read(0) + wide.read(1);
            sums[2] = (short.read(0) + short.read(1) + short.read(2)) as f64;
        }
    }
}

/// The error of a launch that must fail in the simulator: its message.
fn panic_message(launch: impl FnOnce() -> kernel_suite::Result<()>) -> String {
    launch().expect_err("the launch must fail").to_string()
}

#[test]
fn slice_index_past_the_end_names_kernel_thread_and_line() {
    let device = Device::simulator();
    let n = 100;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
    let dx = device.upload(&x).unwrap();
    let mut dy = device.alloc::<f32>(n).unwrap();
    let cfg = LaunchConfig::for_1d(n, 128);
    // SAFETY: one thread per element of `y`.
    unsafe { device.launch(&SHIFTED_COPY, cfg, (&dx, 0, &mut dy)).unwrap() };
    assert_eq!(device.download(&dy).unwrap(), x);

    let message = panic_message(|| unsafe { device.launch(&SHIFTED_COPY, cfg, (&dx, 1, &mut dy)) });
    let source = include_str!("kernel_forms.rs");
    let line = 1 + source.lines().position(|l| l.contains("y[i] = x[i + shift as usize];")).unwrap();
    assert!(
        message.starts_with(&format!(
            "kernel `shifted_copy` panicked in block (0, 0, 0), thread (99, 0, 0) at tests/kernel_forms.rs:{line}:"
        )),
        "not the indexing line {line}: {message}"
    );
    assert!(
        message.ends_with(": slice index 100 out of range for a slice of 100 elements"),
        "unexpected message: {message}"
    );
}

#[test]
fn slice_types_written_out_work_like_references() {
    let device = Device::simulator();
    let mut rng = common::rng(21);
    let (x, y) = (common::random_vec(&mut rng, 77, -1.0, 1.0), common::random_vec(&mut rng, 77, -1.0, 1.0));
    let dx = device.upload(&x).unwrap();
    let mut dy = device.upload(&y).unwrap();
    // SAFETY: one thread per element of `y`.
    unsafe { device.launch(&ADD_INTO, LaunchConfig::for_1d(77, 32), (&dx, &mut dy)).unwrap() };
    let expected: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    assert_eq!(device.download(&dy).unwrap(), expected);
}

#[test]
fn generic_kernel_has_an_entry_per_type_and_both_match_the_reference() {
    assert_eq!(SCALED_ROOT_F32.name(), "scaled_root_f32");
    assert_eq!(SCALED_ROOT_F64.name(), "scaled_root_f64");
    let device = Device::simulator();
    device.set_poison_allocations(true);
    let mut rng = common::rng(13);
    let n = 1001;
    let x = common::random_vec(&mut rng, n, -2.0, 2.0);
    let y = common::random_vec(&mut rng, n, -2.0, 2.0);
    let a = 1.75f32;
    let cfg = LaunchConfig::for_1d(n, 96);

    let (dx, dy) = (device.upload(&x).unwrap(), device.upload(&y).unwrap());
    let mut out = device.alloc::<f32>(n).unwrap();
    // SAFETY: one thread per element of `out`; the inputs are as long.
    unsafe { device.launch(&SCALED_ROOT_F32, cfg, (a, &dx, &dy, &mut out)).unwrap() };
    let got32 = device.download(&out).unwrap();

    let (x64, y64): (Vec<f64>, Vec<f64>) =
        (x.iter().map(|&v| v as f64).collect(), y.iter().map(|&v| v as f64).collect());
    let (dx, dy) = (device.upload(&x64).unwrap(), device.upload(&y64).unwrap());
    let mut out = device.alloc::<f64>(n).unwrap();
    // SAFETY: as above.
    unsafe { device.launch(&SCALED_ROOT_F64, cfg, (a as f64, &dx, &dy, &mut out)).unwrap() };
    let got64 = device.download(&out).unwrap();

    for i in 0..n {
        let exact = (a as f64).mul_add(x64[i], y64[i]).abs().sqrt();
        assert_eq!(got64[i], exact, "f64 element {i}");
        assert_eq!(got32[i], a.mul_add(x[i], y[i]).abs().sqrt(), "f32 element {i}");
        assert!((got32[i] as f64 - exact).abs() <= 1e-6 * exact.max(1.0), "f32 element {i} far from f64");
    }
    assert!(got64.iter().any(|&v| v > 1.0), "inputs too small to show anything");
}

#[test]
fn sub_slices_tail_and_get() {
    let device = Device::simulator();
    device.set_poison_allocations(true);
    let (rows, cols) = (37, 11);
    let mut rng = common::rng(5);
    let x: Vec<f64> =
        common::random_vec(&mut rng, rows * cols, -1.0, 1.0).into_iter().map(f64::from).collect();
    let dx = device.upload(&x).unwrap();
    let mut sums = device.alloc::<f64>(rows).unwrap();
    // SAFETY: one thread per row.
    unsafe {
        device.launch(&ROW_SUMS, LaunchConfig::for_1d(rows, 32), (&dx, cols as u32, &mut sums)).unwrap()
    };
    let got = device.download(&sums).unwrap();
    for (r, row) in x.chunks(cols).enumerate() {
        let expected = row.iter().sum::<f64>() + row[cols - 1];
        assert!((got[r] - expected).abs() <= 1e-12, "row {r}: {} vs {expected}", got[r]);
    }
}

#[test]
fn shared_allocator_aligns_each_array_and_matches_the_host_layout() {
    let layout = probe_layout(13);
    assert_eq!(layout.next_offset::<f64>(), 40, "the end, 38, rounded up to 8");
    assert_eq!(layout.bytes(), 16 + 16 + 6, "13 bytes, 3 of padding, 2 f64, 3 u16");
    assert_eq!(shared::Layout::new().array::<u8>(3).next_offset::<u16>(), 4);

    let device = Device::simulator();
    device.set_poison_allocations(true);
    for n in [1u32, 8, 13, 64] {
        let layout = probe_layout(n as usize);
        let mut offsets = device.alloc::<u32>(3).unwrap();
        let mut sums = device.alloc::<f64>(3).unwrap();
        let cfg = LaunchConfig { grid: Dim3::x(2), block: Dim3::x(64), shared_bytes: layout.bytes_u32() };
        // SAFETY: thread 0 alone writes the outputs.
        unsafe { device.launch(&SHARED_ARRAYS, cfg, (n, &mut offsets, &mut sums)).unwrap() };
        let wide = n.next_multiple_of(8);
        assert_eq!(device.download(&offsets).unwrap(), vec![wide, wide + 16, layout.bytes_u32()], "n = {n}");
        let expected_bytes = (0..n.min(64)).map(|t| (t % 256) as f64).sum::<f64>();
        assert_eq!(device.download(&sums).unwrap(), vec![expected_bytes, 2.0, 3003.0], "n = {n}");
    }
}

#[test]
fn shared_allocator_past_the_launch_size_is_reported() {
    let device = Device::simulator();
    let n = 13;
    let needed = probe_layout(n).bytes_u32();
    let mut offsets = device.alloc::<u32>(3).unwrap();
    let mut sums = device.alloc::<f64>(3).unwrap();
    let cfg = LaunchConfig { grid: Dim3::x(1), block: Dim3::x(32), shared_bytes: needed - 1 };
    let message =
        panic_message(|| unsafe { device.launch(&SHARED_ARRAYS, cfg, (n as u32, &mut offsets, &mut sums)) });
    assert!(message.starts_with("kernel `shared_arrays` panicked in block (0, 0, 0), thread ("), "{message}");
    assert!(
        message.contains(&format!(
            ": shared memory region of 3 × 2 bytes at byte offset 32 does not fit in the launch's {} bytes of \
             dynamic shared memory\n(31 more threads failed, in 1 block in all)",
            needed - 1
        )),
        "unexpected message: {message}"
    );
}

#[test]
fn matrix_views_index_rows_and_columns_and_check_their_shape_once() {
    let device = Device::simulator();
    device.set_poison_allocations(true);
    let (rows, cols) = (23usize, 13usize);
    let mut rng = common::rng(8);
    let x = common::random_vec(&mut rng, rows * cols, -1.0, 1.0);
    let dx = device.upload(&x).unwrap();
    let mut out = device.alloc::<f32>(rows * cols).unwrap();
    let cfg = LaunchConfig::for_2d(cols, rows, 8, 8);
    // SAFETY: the views check their own shapes.
    unsafe {
        device.launch(&MATRIX_NEIGHBOURS, cfg, (&dx, rows as u32, cols as u32, 0u32, &mut out)).unwrap()
    };
    let got = device.download(&out).unwrap();
    for r in 0..rows {
        for c in 0..cols {
            let expected = x[r * cols + c] + 10.0 * x[r * cols + (c + 1) % cols];
            assert_eq!(got[r * cols + c], expected, "element ({r}, {c})");
        }
    }

    let mut out = device.alloc::<f32>(rows * cols).unwrap();
    let args = (&dx, rows as u32, cols as u32, 1u32, &mut out);
    let message = panic_message(|| unsafe { device.launch(&MATRIX_NEIGHBOURS, cfg, args) });
    let expected = format!(
        "sub-slice of {} elements at 0 out of range for a slice of {} elements",
        (rows + 1) * cols,
        rows * cols
    );
    assert!(message.contains(&expected), "unexpected message: {message}");
}

#[test]
fn strided_matrix_reads_the_used_columns_and_checks_its_shape() {
    let device = Device::simulator();
    device.set_poison_allocations(true);
    let (rows, cols, ld) = (9usize, 5usize, 7usize);
    // The last row needs only `cols` of its `ld` elements.
    let x: Vec<f32> = (0..(rows - 1) * ld + cols).map(|i| i as f32).collect();
    let dx = device.upload(&x).unwrap();
    let mut out = device.alloc::<f32>(rows * cols).unwrap();
    let cfg = LaunchConfig::for_2d(cols, rows, 4, 4);
    let (rows32, cols32) = (rows as u32, cols as u32);
    // SAFETY: one thread per element of the view.
    unsafe { device.launch(&TRANSPOSE_STRIDED, cfg, (&dx, rows32, cols32, ld as u32, &mut out)).unwrap() };
    let got = device.download(&out).unwrap();
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(got[c * rows + r], x[r * ld + c] + x[r * ld], "element ({r}, {c})");
        }
    }

    let message = panic_message(|| unsafe {
        device.launch(&TRANSPOSE_STRIDED, cfg, (&dx, rows32, cols32, 4, &mut out))
    });
    assert!(message.contains("a 9 × 5 matrix with rows 4 elements apart does not fit"), "{message}");
    let message = panic_message(|| unsafe {
        device.launch(&TRANSPOSE_STRIDED, cfg, (&dx, rows32, cols32, 8, &mut out))
    });
    assert!(
        message.contains("a 9 × 5 matrix with rows 8 elements apart does not fit a slice of 61 elements"),
        "{message}"
    );
}
