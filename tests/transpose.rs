//! The tiled transpose on every device against the element-by-element reference: shapes that are
//! not multiples of the tile, a single row and column, and a transpose of the transpose.

mod common;

use kernel_suite::transpose::{transpose, transpose_buffer, transpose_reference};
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
