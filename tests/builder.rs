//! What the builder (build.rs, the crate gpu-builder) embedded: PTX with every declared kernel but
//! the Hopper-only ones, and a cubin with all of them whose ptxas report shows no spills (but the
//! listed ones, within their bytes).

use kernel_suite::KERNELS;
use std::io::Write;

#[test]
fn ptx_contains_every_declared_kernel() {
    let declared = KERNELS.declared_kernels;
    assert!(declared.contains(&"saxpy") && declared.contains(&"sum_f32"));
    let target = KERNELS.ptx_target;
    assert!(KERNELS.ptx.contains(&format!(".target {target}")), "PTX target is not {target}");
    for name in declared {
        let entry = KERNELS.ptx.contains(&format!(".visible .entry {name}("));
        if KERNELS.hopper_kernels.contains(name) {
            assert!(!entry, "the sm_90a-only `{name}` is in the portable PTX");
        } else {
            assert!(entry, "no PTX entry for `{name}`");
        }
    }
    // CUDA's system calls (`printf!`, `gpu_assert!`) are external functions the driver provides;
    // any other is a libdevice function that was not linked in.
    let unresolved: Vec<&str> = KERNELS
        .ptx
        .lines()
        .filter(|l| l.starts_with(".extern .func"))
        .filter(|l| !l.contains(" vprintf") && !l.contains(" __assertfail"))
        .collect();
    assert!(
        unresolved.is_empty(),
        "unresolved external functions in the PTX (libdevice not linked?): {unresolved:?}"
    );
}

/// Kernels that may spill, each with its most bytes of spill stores and why: the divide and
/// conquer within 128 registers (512 threads) spills 260 bytes, and none at 256 threads (196
/// registers), but there it measured 3–8% slower (H200, one call: 16 × 512 7.77 against 7.23 ms,
/// which misses issue 51's 1/10 of torch's batched `eigh`; 1 × 512 2.87 against 2.70).
const SPILLS_ALLOWED: &[(&str, u32)] = &[("tridiagonal_divide_and_conquer", 260)];

#[test]
fn no_kernel_spills() {
    if KERNELS.cubin.is_none() {
        let _ =
            writeln!(std::io::stderr(), "SKIPPED no_kernel_spills: built without ptxas, no resource report");
        return;
    }
    for name in KERNELS.declared_kernels {
        let r = KERNELS.resources(name).unwrap_or_else(|| panic!("no ptxas report for `{name}`"));
        assert!(r.registers > 0, "`{name}` reported 0 registers: report not parsed");
        match SPILLS_ALLOWED.iter().find(|(allowed, _)| allowed == name) {
            Some(&(_, most)) => {
                assert!(r.spill_store_bytes <= most, "`{name}` spills more than its {most} bytes: {r:?}")
            }
            None => assert_eq!((r.spill_store_bytes, r.spill_load_bytes), (0, 0), "`{name}` spills: {r:?}"),
        }
    }
}
