//! Asking for a GPU that is not there gives a clear error, from the library and from a binary.

mod common;

use kernel_suite::Device;
use std::process::Command;

#[test]
fn missing_gpu_is_a_clear_error() {
    let err = Device::gpu(9999, &kernel_suite::KERNELS).err().expect("GPU 9999 cannot exist");
    assert!(err.is_no_gpu(), "unexpected error kind: {err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("no CUDA GPU available (") || text.starts_with("no usable CUDA driver ("),
        "unexpected message: {text}"
    );
}

#[test]
fn binary_exits_nonzero_with_one_line_when_gpu_required() {
    let out = Command::new(common::bin("saxpy", env!("CARGO_BIN_EXE_saxpy")))
        .args(["--device", "gpu", "--gpu", "9999", "--n", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {stderr}");
    assert!(lines[0].starts_with("error: no "), "stderr: {stderr}");
}
