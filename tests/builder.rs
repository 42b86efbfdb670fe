//! What the builder (build.rs) embedded: PTX with every declared kernel but the Hopper-only ones,
//! and a cubin with all of them whose ptxas report shows no spills.

use kernel_suite::module::{CUBIN, DECLARED_KERNELS, HOPPER_KERNELS, PTX, PTX_TARGET, PTXAS_RESOURCES};
use std::io::Write;

#[test]
fn ptx_contains_every_declared_kernel() {
    assert!(DECLARED_KERNELS.contains(&"saxpy") && DECLARED_KERNELS.contains(&"sum_f32"));
    assert!(PTX.contains(&format!(".target {PTX_TARGET}")), "PTX target is not {PTX_TARGET}");
    for name in DECLARED_KERNELS {
        let entry = PTX.contains(&format!(".visible .entry {name}("));
        if HOPPER_KERNELS.contains(name) {
            assert!(!entry, "the sm_90a-only `{name}` is in the portable PTX");
        } else {
            assert!(entry, "no PTX entry for `{name}`");
        }
    }
    // CUDA's system calls (`printf!`, `gpu_assert!`) are external functions the driver provides;
    // any other is a libdevice function that was not linked in.
    let unresolved: Vec<&str> = PTX
        .lines()
        .filter(|l| l.starts_with(".extern .func"))
        .filter(|l| !l.contains(" vprintf") && !l.contains(" __assertfail"))
        .collect();
    assert!(
        unresolved.is_empty(),
        "unresolved external functions in the PTX (libdevice not linked?): {unresolved:?}"
    );
}

#[test]
fn no_kernel_spills() {
    if CUBIN.is_none() {
        let _ =
            writeln!(std::io::stderr(), "SKIPPED no_kernel_spills: built without ptxas, no resource report");
        return;
    }
    for name in DECLARED_KERNELS {
        let r = PTXAS_RESOURCES
            .iter()
            .find(|r| r.name == *name)
            .unwrap_or_else(|| panic!("no ptxas report for `{name}`"));
        assert!(r.registers > 0, "`{name}` reported 0 registers: report not parsed");
        assert_eq!((r.spill_store_bytes, r.spill_load_bytes), (0, 0), "`{name}` spills: {r:?}");
    }
}
