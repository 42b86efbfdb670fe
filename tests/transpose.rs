//! The tiled transpose on every device against the element-by-element reference: shapes that are
//! not multiples of the tile, a single row and column, and a transpose of the transpose.

mod common;

use kernel_suite::transpose::{transpose, transpose_batch_f64, transpose_buffer, transpose_reference};
use ndarray::Array2;

#[test]
fn transpose_matches_reference() {
    let mut rng = common::rng(50);
    for device in common::devices("transpose_matches_reference") {
        for (rows, cols) in [(1usize, 1usize), (1, 77), (77, 1), (32, 32), (33, 31), (257, 129), (1000, 37)] {
            let a =
                Array2::from_shape_vec((rows, cols), common::random_vec(&mut rng, rows * cols, -1.0, 1.0))
                    .unwrap();
            let t = transpose(&device, a.view()).unwrap();
            assert_eq!(t, transpose_reference(a.view()), "{rows} × {cols} on {}", device.describe());
            assert_eq!(
                transpose(&device, t.view()).unwrap(),
                a,
                "{rows} × {cols} twice on {}",
                device.describe()
            );
        }
    }
}

#[test]
fn transpose_rejects_shapes_that_do_not_fit() {
    for device in common::devices("transpose_rejects_shapes_that_do_not_fit") {
        let input = device.upload(&[1.0f32; 12]).unwrap();
        let mut output = device.alloc::<f32>(12).unwrap();
        let err = transpose_buffer(&device, &input, 5, 3, &mut output).unwrap_err();
        assert!(err.to_string().contains("a 5 × 3 matrix does not fit buffers of 12 and 12"), "{err}");
        assert!(transpose_buffer(&device, &input, 0, 12, &mut output).is_err());
    }
}

/// The batched f64 transpose: each matrix of a batch, shapes that are not multiples of the tile,
/// into poisoned output, against the element-by-element reference.
#[test]
fn a_batch_of_f64_matrices_transposes_each() {
    let mut rng = common::rng(51);
    for device in common::devices("a_batch_of_f64_matrices_transposes_each") {
        device.set_poison_allocations(true);
        for (rows, cols, matrices) in [(1usize, 1usize, 1usize), (33, 70, 3), (5, 129, 2)] {
            let len = rows * cols;
            let values: Vec<f64> =
                common::random_vec(&mut rng, matrices * len, -1.0, 1.0).into_iter().map(f64::from).collect();
            let input = device.upload(&values).unwrap();
            let mut output = device.alloc::<f64>(matrices * len).unwrap();
            // SAFETY: both buffers outlive the download, which waits for the queue.
            unsafe {
                transpose_batch_f64(
                    &device,
                    device.queue(),
                    input.view(..).unwrap(),
                    (rows, cols),
                    matrices,
                    output.view_mut(..).unwrap(),
                )
                .unwrap()
            };
            let got = device.download(&output).unwrap();
            for z in 0..matrices {
                for r in 0..rows {
                    for c in 0..cols {
                        let (want, at) = (values[z * len + r * cols + c], z * len + c * rows + r);
                        assert_eq!(
                            got[at],
                            want,
                            "matrix {z} ({r}, {c}) of {rows} × {cols} on {}",
                            device.describe()
                        );
                    }
                }
            }
        }
        let input = device.upload(&[1.0f64; 12]).unwrap();
        let mut output = device.alloc::<f64>(12).unwrap();
        // SAFETY: as above; the shapes are refused before any launch.
        let err = unsafe {
            transpose_batch_f64(
                &device,
                device.queue(),
                input.view(..).unwrap(),
                (2, 3),
                3,
                output.view_mut(..).unwrap(),
            )
        }
        .unwrap_err();
        assert!(err.to_string().contains("3 matrices of 2 × 3 do not fit buffers of 12 and 12"), "{err}");
    }
}
