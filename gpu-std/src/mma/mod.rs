//! Tensor cores and asynchronous copies: warp-level matrix multiply-accumulate (`mma.sync`), the
//! f32 → tf32 conversion and `cp.async` global → shared copies, through inline PTX. Needs sm_80.
//!
//! # Warp-level MMA
//!
//! `D = A·B + C` for one small matrix product per warp: all 32 lanes call the same function
//! together (converged, as for [`crate::warp`]), each passing its *fragment* — the few elements of
//! `A`, `B` and `C` it holds — and each receiving its fragment of `D`. Which lane holds which
//! element is fixed by the hardware (PTX ISA, "Matrix Fragments for mma.m16n8k8 / m16n8k16 /
//! m8n8k4"); the `*_coords` functions below give it, with `g = lane / 4` (the group) and
//! `t = lane % 4` (the thread in the group):
//!
//! | operation | operand | registers | element of register `r` (row, column) |
//! |---|---|---|---|
//! | [`mma_tf32_m16n8k8`] | `A` 16×8 | 4 × tf32 | `(g + 8·(r % 2), t + 4·(r / 2))` |
//! | | `B` 8×8 (k × n) | 2 × tf32 | `(t + 4·r, g)` |
//! | [`mma_f16_m16n8k16`], [`mma_bf16_m16n8k16`] | `A` 16×16 | 4 × 2 halves, element `h` = register `h/2`, low half first | `(g + 8·((h/2) % 2), 2t + h % 2 + 8·(h / 4))` |
//! | | `B` 16×8 (k × n) | 2 × 2 halves | `(2t + h % 2 + 8·(h / 2), g)` |
//! | all three | `C`, `D` 16×8 | 4 × f32 | `(g + 8·(r / 2), 2t + r % 2)` |
//! | [`mma_f64_m8n8k4`] | `A` 8×4 | 1 × f64 | `(g, t)` |
//! | | `B` 4×8 (k × n) | 1 × f64 | `(t, g)` |
//! | | `C`, `D` 8×8 | 2 × f64 | `(g, 2t + r)` |
//!
//! TF32 is f32 with a 10-bit mantissa (the low 13 bits zero): [`to_tf32`] rounds to it. The tensor
//! cores read only the tf32 bits of an f32 operand, so kernels convert first; products of tf32
//! (or f16, bf16) values are exact in f32 and are accumulated in f32.
//!
//! # Asynchronous copies
//!
//! [`cp_async_16`] (`cp.async.cg`, bypassing L1), [`cp_async_8`] and [`cp_async_4`] (`cp.async.ca`)
//! start a copy of 16, 8 or 4 bytes from global to shared memory without passing through
//! registers; `src_bytes` of them are read and the rest of the destination is zero-filled (0 reads
//! nothing: the way to pad edge tiles). Copies issued since the last [`cp_async_commit_group`] form a
//! group; [`cp_async_wait_group`]`::<N>()` waits until at most `N` groups of this thread are still in
//! flight. Another thread sees the data only after a barrier following the wait. Destinations are
//! shared-window addresses from [`shared_address`]. On sm_90, [`cp_async_bulk_store_streaming`]
//! goes the other way, from shared to global memory, many bytes at once through the copy engine.
//!
//! # Matrix loads
//!
//! [`ldmatrix_x4`] loads a warp's fragments of four 8 × 8 16-bit (or 8 × 4 32-bit) matrices from
//! shared memory in one instruction, each lane naming one row.
//!
//! # In the simulator
//!
//! Each MMA gathers the 32 lanes' fragments (all 32 lanes of the warp must be present), builds `A`
//! and `B`, and gives each lane its elements of `D`, computed from the exact products summed in f64
//! and rounded once to f32 (tf32 operands are first truncated to their tf32 bits, as the hardware
//! reads them). The hardware's order of accumulation inside one MMA is not specified, so GPU results
//! may differ from the simulator's in the last bits. An `ldmatrix` gathers the lanes' row
//! addresses and reads shared memory as the hardware does. A `cp.async` is a synchronous copy (with
//! the same zero fill), and so is a bulk copy; the waits are no-ops; shared-window addresses are
//! byte offsets into the block's dynamic shared memory, checked against its size.
//!
//! # Where each part lives
//!
//! `sync.rs`: the tf32 conversion, the fragment coordinates and the warp-level `mma.sync` forms;
//! `copy.rs`: shared-window addresses, `ldmatrix` and the `cp.async` copies (bulk included);
//! `wgmma.rs`: the Hopper warpgroup MMA, its descriptors, fences and waits. All are used as
//! `gpu_std::mma::…`.

mod copy;
mod sync;
mod wgmma;

pub use copy::*;
pub use sync::*;
pub use wgmma::*;
