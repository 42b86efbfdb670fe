//! The builder: compiles the device crate `kernels/` to PTX for `nvptx64-nvidia-cuda` twice — a
//! portable module (`.target sm_80`, JIT-compiled by the driver of any newer GPU) and a Hopper
//! module (`.target sm_90a`, which adds the kernels that use `wgmma`) — assembles the Hopper one
//! into an sm_90a cubin with `ptxas` when one is available, and embeds the PTX and the cubin in
//! the host library.
//!
//! It plays the role of rust-cuda's `cuda_builder` with rustc's own NVPTX backend:
//! `cargo rustc --crate-type cdylib -Zbuild-std=core --target nvptx64-nvidia-cuda`, linked by
//! `llvm-bitcode-linker` together with CUDA's libdevice (so `__nv_sinf` and friends resolve).
//!
//! Outputs (besides the generated `kernels_embed.rs` in `OUT_DIR`) go to `target/<profile>/kernels/`:
//! `kernels.ptx`, `kernels.sm_90a.ptx`, `kernels.sm_90a.cubin` and `ptxas-report.txt` (registers,
//! stack, spills and shared memory per kernel of the cubin).

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

/// PTX `.target` of the embedded PTX: compute capability 8.0 (Ampere) and newer GPUs JIT it; the
/// tensor-core kernels (`mma.sync` with tf32, `cp.async`) need sm_80.
const PTX_TARGET: &str = "sm_80";
/// Architecture of the embedded cubin (H100, H200; `a`: with the arch-specific `wgmma`); other
/// GPUs load the PTX. Kernels declared under `#[cfg(… target_feature = "sm_90a" …)]` exist only here.
const CUBIN_ARCH: &str = "sm_90a";
/// Toolchain that provides the `llvm-bitcode-linker` component (the pinned nightly lacks it).
/// `scripts/setup.sh` installs this same version.
const LINKER_TOOLCHAIN: &str = "1.95.0";

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let profile_dir = out_dir.ancestors().nth(3).unwrap().to_path_buf();
    let artifacts = profile_dir.join("kernels");
    let nested_target = profile_dir.parent().unwrap().join("nvptx-kernels");

    println!("cargo:rerun-if-changed=kernels/src");
    println!("cargo:rerun-if-changed=kernels/Cargo.toml");
    println!("cargo:rerun-if-changed=gpu-std/src");
    println!("cargo:rerun-if-changed=gpu-std/Cargo.toml");
    println!("cargo:rerun-if-changed=gpu-std/macros/src");
    for var in ["CUDA_HOME", "CUDA_PATH", "KERNELS_BITCODE_LINKER"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let cuda = find_cuda(&root).unwrap_or_else(|msg| fail(&msg));
    let linker = find_bitcode_linker().unwrap_or_else(|msg| fail(&msg));
    let compile = |cpu: &str| {
        compile_kernels(&root, &nested_target.join(cpu), cpu, &linker, &cuda.libdevice)
            .unwrap_or_else(|msg| fail(&msg))
    };

    fs::create_dir_all(&artifacts).unwrap();
    let declared = declared_kernels(&root.join("kernels/src"));
    let portable: Vec<&Declared> = declared.iter().filter(|k| !k.hopper_only).collect();
    let ptx = with_launch_bounds(&fs::read_to_string(compile(PTX_TARGET)).unwrap(), &portable)
        .unwrap_or_else(|msg| fail(&msg));
    fs::write(artifacts.join("kernels.ptx"), &ptx).unwrap();
    let cubin = match &cuda.ptxas {
        Some(ptxas) => {
            let all: Vec<&Declared> = declared.iter().collect();
            let hopper = with_launch_bounds(&fs::read_to_string(compile(CUBIN_ARCH)).unwrap(), &all)
                .unwrap_or_else(|msg| fail(&msg));
            let hopper_ptx = artifacts.join(format!("kernels.{CUBIN_ARCH}.ptx"));
            fs::write(&hopper_ptx, &hopper).unwrap();
            Some(assemble(ptxas, &hopper_ptx, &artifacts).unwrap_or_else(|msg| fail(&msg)))
        }
        None => {
            println!(
                "cargo:warning=ptxas not found: no cubin embedded (GPUs will JIT the PTX) and no \
                 ptxas resource report; run scripts/setup.sh"
            );
            None
        }
    };
    write_embed(&out_dir, &artifacts, &declared, cubin.as_ref());
    let targets = match cubin {
        Some(_) => format!("PTX {PTX_TARGET} + cubin {CUBIN_ARCH}"),
        None => format!("PTX {PTX_TARGET}, no cubin"),
    };
    println!("cargo:rustc-env=KERNEL_SUITE_TARGETS={targets}");
}

/// Stops the build with a readable message instead of a build-script panic.
fn fail(message: &str) -> ! {
    eprintln!("\nerror: {message}\n");
    exit(1)
}

struct CudaTools {
    libdevice: PathBuf,
    ptxas: Option<PathBuf>,
}

/// A CUDA toolkit from `CUDA_HOME`/`CUDA_PATH`, else the one `scripts/setup.sh` assembles from
/// NVIDIA's PyPI wheels in `.cache/cuda/root`, else `/usr/local/cuda`.
fn find_cuda(root: &Path) -> Result<CudaTools, String> {
    let mut candidates: Vec<PathBuf> =
        ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(env::var_os).map(PathBuf::from).collect();
    candidates.push(root.join(".cache/cuda/root"));
    candidates.push(PathBuf::from("/usr/local/cuda"));
    for dir in &candidates {
        let libdevice = dir.join("nvvm/libdevice/libdevice.10.bc");
        if libdevice.is_file() {
            let ptxas = Some(dir.join("bin/ptxas")).filter(|p| p.is_file());
            println!("cargo:rerun-if-changed={}", libdevice.display());
            return Ok(CudaTools { libdevice, ptxas });
        }
    }
    Err(format!(
        "CUDA's libdevice (nvvm/libdevice/libdevice.10.bc) was not found in any of {candidates:?}.\n\
         Run `scripts/setup.sh` (it fetches libdevice and ptxas from NVIDIA's PyPI wheels), or point \
         CUDA_HOME at a CUDA toolkit."
    ))
}

fn find_bitcode_linker() -> Result<PathBuf, String> {
    if let Some(path) = env::var_os("KERNELS_BITCODE_LINKER") {
        return Ok(path.into());
    }
    let output = Command::new("rustup")
        .args(["run", LINKER_TOOLCHAIN, "rustc", "--print", "sysroot"])
        .output()
        .map_err(|e| format!("could not run rustup to find llvm-bitcode-linker: {e}"))?;
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let host = env::var("HOST").unwrap();
    let linker =
        Path::new(&sysroot).join(format!("lib/rustlib/{host}/bin/self-contained/llvm-bitcode-linker"));
    if output.status.success() && linker.is_file() {
        Ok(linker)
    } else {
        Err(format!(
            "llvm-bitcode-linker was not found (looked for {}).\nRun `scripts/setup.sh`, or \
             `rustup component add llvm-bitcode-linker --toolchain {LINKER_TOOLCHAIN}`.",
            linker.display()
        ))
    }
}

/// Runs the nested cargo build of `kernels/` for NVPTX with `.target` `cpu` and returns the PTX
/// file.
fn compile_kernels(
    root: &Path,
    target_dir: &Path,
    cpu: &str,
    linker: &Path,
    libdevice: &Path,
) -> Result<PathBuf, String> {
    let flags = [
        format!("-Ctarget-cpu={cpu}"),
        format!("-Clinker={}", linker.display()),
        format!("-Clink-arg={}", libdevice.display()),
        "-Alinker_messages".to_string(),
    ];
    let mut cmd = nested_cargo(root, "rustc", target_dir);
    cmd.args(["--lib", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core", "--crate-type", "cdylib"])
        .env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    let output = cmd.output().map_err(|e| format!("could not run cargo for the kernels: {e}"))?;
    if !output.status.success() {
        // The outer build compiles `kernels/` for the host too and reports its errors there: repeat
        // the compiler's messages only when the host build of the same code passes (code under
        // `#[cfg(target_arch = "nvptx64")]`, a backend or link error).
        if !compiles_for_host(root, target_dir) {
            return Err("the GPU kernels in kernels/ do not compile (the compiler's messages are those \
                        cargo shows for the `kernels` crate)"
                .to_string());
        }
        return Err(format!(
            "the GPU kernels in kernels/ failed to compile for nvptx64-nvidia-cuda ({cpu}):\n\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let ptx = target_dir.join("nvptx64-nvidia-cuda/release/kernels.ptx");
    if ptx.is_file() { Ok(ptx) } else { Err(format!("the kernel build wrote no {}", ptx.display())) }
}

/// Whether `kernels/` passes `cargo check` for the host, in `target_dir` (whose proc macros the
/// NVPTX build has already compiled).
fn compiles_for_host(root: &Path, target_dir: &Path) -> bool {
    let mut cmd = nested_cargo(root, "check", target_dir);
    cmd.args(["--lib", "--target", &env::var("HOST").unwrap()]);
    cmd.output().is_ok_and(|output| output.status.success())
}

/// `cargo SUBCOMMAND` of the release build of `kernels/` in `target_dir`, quiet, without the outer
/// build's settings (clippy's wrapper, host flags, its target).
fn nested_cargo(root: &Path, subcommand: &str, target_dir: &Path) -> Command {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args([subcommand, "--manifest-path", "kernels/Cargo.toml", "--release"])
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--color", "never", "--quiet"])
        .args(["--config", "profile.release.lto=\"fat\""])
        .args(["--config", "profile.release.panic=\"abort\""])
        .args(["--config", "profile.release.codegen-units=1"]);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// One kernel's resources as `ptxas -v` reports them.
#[derive(Default)]
struct Resources {
    name: String,
    registers: u32,
    stack_bytes: u32,
    spill_store_bytes: u32,
    spill_load_bytes: u32,
    shared_bytes: u32,
}

struct Cubin {
    path: PathBuf,
    resources: Vec<Resources>,
}

fn assemble(ptxas: &Path, ptx: &Path, artifacts: &Path) -> Result<Cubin, String> {
    let cubin = artifacts.join(format!("kernels.{CUBIN_ARCH}.cubin"));
    let output = Command::new(ptxas)
        .arg(format!("-arch={CUBIN_ARCH}"))
        .arg("-v")
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .output()
        .map_err(|e| format!("could not run {}: {e}", ptxas.display()))?;
    let report = String::from_utf8_lossy(&output.stderr).to_string();
    if !output.status.success() {
        return Err(format!("ptxas rejected the kernels' PTX:\n{report}"));
    }
    fs::write(artifacts.join("ptxas-report.txt"), &report).unwrap();
    // ptxas's advisories (e.g. C7514/C7515: `wgmma` serialised, waiting after every MMA) change no
    // result but cost speed silently; say them where the kernel author sees them.
    for line in report.lines().filter(|l| l.contains("Potential Performance Loss")) {
        println!("cargo:warning=ptxas: {}", line.trim_start_matches("ptxas info    : "));
    }
    Ok(Cubin { path: cubin, resources: parse_ptxas_report(&report) })
}

/// Reads `ptxas -v` output: per entry, "Compiling entry function 'NAME'", then
/// "N bytes stack frame, N bytes spill stores, N bytes spill loads" and
/// "Used N registers, … N bytes smem …".
fn parse_ptxas_report(report: &str) -> Vec<Resources> {
    fn number_before(line: &str, unit: &str) -> Option<u32> {
        let end = line.find(unit)?;
        line[..end].trim_end().rsplit([' ', ',']).next()?.parse().ok()
    }
    let mut all: Vec<Resources> = Vec::new();
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            all.push(Resources { name, ..Default::default() });
        } else if let Some(r) = all.last_mut() {
            if line.contains("stack frame") {
                r.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                r.spill_store_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
                r.spill_load_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used") && line.contains("registers") {
                r.registers = number_before(line, "registers").unwrap_or(0);
                r.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    all
}

/// A function marked `#[kernel]` in the device crate's sources.
struct Declared {
    name: String,
    /// `(max threads per block, min blocks per SM)` from `#[kernel(launch_bounds(…))]`.
    launch_bounds: Option<(u32, u32)>,
    /// Declared under a `#[cfg(…)]` naming `target_feature = "sm_90a"`: only in the Hopper module.
    hopper_only: bool,
}

/// What a `#[kernel(…)]` line lists: the types of a generic kernel and its launch bounds.
struct KernelAttribute {
    types: Vec<String>,
    launch_bounds: Option<(u32, u32)>,
}

/// Reads `#[kernel]`, `#[kernel(f32, f64)]`, `#[kernel(launch_bounds(256, 2))]` or
/// `#[kernel(f32, f64, launch_bounds(256, 2))]` (one line); `None` for any other line.
fn parse_kernel_attribute(line: &str) -> Option<Result<KernelAttribute, String>> {
    if line == "#[kernel]" {
        return Some(Ok(KernelAttribute { types: Vec::new(), launch_bounds: None }));
    }
    let list = line.strip_prefix("#[kernel(")?.strip_suffix(")]")?;
    let mut attribute = KernelAttribute { types: Vec::new(), launch_bounds: None };
    let (types, bounds) = match list.find("launch_bounds(") {
        Some(at) => (&list[..at], Some(&list[at..])),
        None => (list, None),
    };
    for ty in types.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if !ty.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Some(Err(format!("cannot read the type `{ty}`")));
        }
        attribute.types.push(ty.to_string());
    }
    if let Some(bounds) = bounds {
        let args = bounds.strip_prefix("launch_bounds(").and_then(|b| b.strip_suffix(')'));
        let numbers: Vec<u32> =
            args.unwrap_or_default().split(',').filter_map(|a| a.trim().parse().ok()).collect();
        match numbers[..] {
            [threads, blocks] => attribute.launch_bounds = Some((threads, blocks)),
            _ => return Some(Err("cannot read launch_bounds(MAX_THREADS, MIN_BLOCKS)".to_string())),
        }
    }
    Some(Ok(attribute))
}

/// The PTX entries of the functions marked `#[kernel…]` in the device crate's sources: the
/// function's name, or `name_TYPE` for each type of a generic kernel.
fn declared_kernels(src: &Path) -> Vec<Declared> {
    let mut kernels = Vec::new();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let mut marked: Option<KernelAttribute> = None;
        let mut hopper_only = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[cfg(") && line.contains("target_feature = \"sm_90a\"") {
                hopper_only = true;
            } else if let Some(attribute) = parse_kernel_attribute(line) {
                let attribute =
                    attribute.unwrap_or_else(|e| fail(&format!("{}: `{line}`: {e}", file.display())));
                marked = Some(attribute);
            } else if let Some(attribute) = marked.take_if(|_| line.contains("fn ")) {
                let after = line.split("fn ").nth(1).unwrap();
                let name = after.split(['(', '<', ' ']).next().unwrap().to_string();
                let launch_bounds = attribute.launch_bounds;
                for ty in &attribute.types {
                    kernels.push(Declared { name: format!("{name}_{ty}"), launch_bounds, hopper_only });
                }
                if attribute.types.is_empty() {
                    kernels.push(Declared { name, launch_bounds, hopper_only });
                }
                hopper_only = false;
            } else if marked.is_none() && !line.starts_with("#[") && !line.starts_with("///") {
                hopper_only = false;
            }
        }
    }
    kernels
}

/// The `.rs` files under `dir`, subfolders (a family's module tree) included.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for path in fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// Adds `.maxntid` and `.minnctapersm` (CUDA's `__launch_bounds__`) after the parameter list of each
/// entry declared with launch bounds.
fn with_launch_bounds(ptx: &str, declared: &[&Declared]) -> Result<String, String> {
    let mut out = ptx.to_string();
    for k in declared {
        let Some((threads, blocks)) = k.launch_bounds else { continue };
        let entry = format!(".visible .entry {}(", k.name);
        let start = out.find(&entry).ok_or_else(|| format!("no PTX entry for `{}`", k.name))?;
        let close = out[start..]
            .find("\n)")
            .map(|i| start + i + 2)
            .ok_or_else(|| format!("no end of the parameter list of `{}` in the PTX", k.name))?;
        let line_end = out[close..].find('\n').map_or(out.len(), |i| close + i);
        out.insert_str(line_end, &format!("\n.maxntid {threads}, 1, 1\n.minnctapersm {blocks}"));
    }
    Ok(out)
}

fn write_embed(out_dir: &Path, artifacts: &Path, declared: &[Declared], cubin: Option<&Cubin>) {
    let mut code = String::new();
    let ptx = artifacts.join("kernels.ptx");
    writeln!(
        code,
        "/// PTX of every kernel but the [`HOPPER_KERNELS`] (`.target {PTX_TARGET}`), JIT-compiled by the \
         driver."
    )
    .unwrap();
    writeln!(code, "pub const PTX: &str = include_str!({:?});", ptx.display().to_string()).unwrap();
    writeln!(code, "/// PTX `.target` of [`PTX`].\npub const PTX_TARGET: &str = {PTX_TARGET:?};").unwrap();
    let min_arch: u32 = PTX_TARGET.trim_start_matches("sm_").parse().unwrap();
    writeln!(
        code,
        "/// Oldest compute capability (major·10 + minor) that can run [`PTX`].\n\
         pub const MIN_COMPUTE_CAPABILITY: u32 = {min_arch};"
    )
    .unwrap();
    let arch: u32 = CUBIN_ARCH.trim_start_matches("sm_").trim_end_matches('a').parse().unwrap();
    writeln!(
        code,
        "/// Compute capability of [`CUBIN`] as major·10 + minor.\npub const CUBIN_ARCH: u32 = {arch};"
    )
    .unwrap();
    match cubin {
        Some(c) => writeln!(
            code,
            "/// Every kernel, assembled by ptxas for {CUBIN_ARCH} (loads on [`CUBIN_ARCH`] only).\n\
             pub const CUBIN: Option<&[u8]> = Some(include_bytes!({:?}));",
            c.path.display().to_string()
        ),
        None => writeln!(
            code,
            "/// None: ptxas was not available at build time.\npub const CUBIN: Option<&[u8]> = None;"
        ),
    }
    .unwrap();
    writeln!(code, "/// Kernels declared with `#[kernel]` in `kernels/src`.").unwrap();
    let all: Vec<&str> = declared.iter().map(|k| k.name.as_str()).collect();
    writeln!(code, "pub const DECLARED_KERNELS: &[&str] = &{all:?};").unwrap();
    let hopper: Vec<&str> = declared.iter().filter(|k| k.hopper_only).map(|k| k.name.as_str()).collect();
    writeln!(
        code,
        "/// Kernels only in [`CUBIN`] (they use sm_90a instructions such as `wgmma`), not in [`PTX`]."
    )
    .unwrap();
    writeln!(code, "pub const HOPPER_KERNELS: &[&str] = &{hopper:?};").unwrap();
    writeln!(code, "/// `ptxas -v` resources per kernel; empty without ptxas.").unwrap();
    writeln!(code, "pub const PTXAS_RESOURCES: &[KernelResources] = &[").unwrap();
    for r in cubin.map(|c| c.resources.as_slice()).unwrap_or_default() {
        writeln!(
            code,
            "    KernelResources {{ name: {:?}, registers: {}, stack_bytes: {}, \
             spill_store_bytes: {}, spill_load_bytes: {}, static_shared_bytes: {} }},",
            r.name, r.registers, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes, r.shared_bytes
        )
        .unwrap();
    }
    writeln!(code, "];").unwrap();
    fs::write(out_dir.join("kernels_embed.rs"), code).unwrap();
}
