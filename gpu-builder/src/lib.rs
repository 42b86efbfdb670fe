//! The kernel builder: what a `build.rs` calls to compile a kernel crate (written against
//! `gpu-std`) to PTX for `nvptx64-nvidia-cuda` and embed it in the package being built, as
//! rust-cuda's `cuda_builder` does, with rustc's own NVPTX backend.
//!
//! ```no_run
//! // The `main` of build.rs in a host package whose kernel crate is `kernels/` (a path dependency
//! // of the package too, for the launch descriptors and the simulator):
//! gpu_builder::Builder::new("kernels").build_or_exit();
//! ```
//!
//! and in the package, `gpu_launch::embedded_kernels!()` is the result, an
//! `EmbeddedKernels` to open GPUs with:
//!
//! ```ignore
//! pub static KERNELS: gpu_launch::EmbeddedKernels = gpu_launch::embedded_kernels!();
//! ```
//!
//! [`Builder::build`] compiles the kernel crate twice — a portable module (`.target sm_80`,
//! JIT-compiled by the driver of any newer GPU) and a Hopper module (`.target sm_90a`, which adds
//! the kernels declared under `#[cfg(target_feature = "sm_90a")]`, e.g. those that use `wgmma`) —
//! with `cargo rustc --crate-type cdylib -Zbuild-std=core --target nvptx64-nvidia-cuda`, linked by
//! `llvm-bitcode-linker` together with CUDA's libdevice (so `__nv_sinf` and friends resolve);
//! assembles the Hopper module into an sm_90a cubin with `ptxas` when one is available; and writes
//! `kernels_embed.rs` to `OUT_DIR`. It also sets the environment variable `KERNEL_TARGETS` of the
//! package's compilation (`"PTX sm_80 + cubin sm_90a"`) for version strings.
//!
//! Outputs worth reading go to `target/<profile>/kernels/`: `kernels.ptx`, `kernels.sm_90a.ptx`,
//! `kernels.sm_90a.cubin` and `ptxas-report.txt` (registers, stack, spills and shared memory per
//! kernel of the cubin).
//!
//! The tools: libdevice and `ptxas` from a CUDA toolkit (`CUDA_HOME`, `CUDA_PATH`), else from
//! `.cache/cuda/root` in the package (where a project's `scripts/setup.sh` unpacks NVIDIA's PyPI
//! wheels), else `/usr/local/cuda`; `llvm-bitcode-linker` from the rustup toolchain
//! [`LINKER_TOOLCHAIN`] (or the path in `KERNELS_BITCODE_LINKER`). The package's own toolchain
//! must be a nightly with `rust-src` (for `-Zbuild-std=core`).
#![warn(missing_docs)]

use std::env;
use std::fmt::{self, Write as _};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

/// PTX `.target` of the embedded PTX: compute capability 8.0 (Ampere) and newer GPUs JIT it; the
/// tensor-core kernels (`mma.sync` with tf32, `cp.async`) need sm_80.
pub const PTX_TARGET: &str = "sm_80";
/// Architecture of the embedded cubin (H100, H200; `a`: with the arch-specific `wgmma`); other
/// GPUs load the PTX. Kernels declared under `#[cfg(… target_feature = "sm_90a" …)]` exist only here.
pub const CUBIN_ARCH: &str = "sm_90a";
/// Toolchain that provides the `llvm-bitcode-linker` component (nightlies lack it); a project's
/// `scripts/setup.sh` installs this same version.
pub const LINKER_TOOLCHAIN: &str = "1.95.0";

/// Why the kernels could not be built: a message for the person building, with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Builds one kernel crate for the package whose build script calls it.
#[derive(Debug, Clone)]
pub struct Builder {
    /// The kernel crate's folder (the one with its `Cargo.toml`), absolute.
    kernel_crate: PathBuf,
}

impl Builder {
    /// The kernel crate in `folder`, relative to the package being built (`CARGO_MANIFEST_DIR`).
    pub fn new(folder: impl AsRef<Path>) -> Builder {
        Builder { kernel_crate: manifest_dir().join(folder) }
    }

    /// Compiles the kernel crate and writes its embedding, or says why not. Tells cargo to build
    /// again when the kernel crate, a crate it depends on by path or git, or the CUDA tools change.
    pub fn build(&self) -> Result<(), Error> {
        build(&self.kernel_crate).map_err(Error)
    }

    /// [`Builder::build`], stopping the build with the error's message (and no build-script
    /// backtrace) when it fails.
    pub fn build_or_exit(&self) {
        if let Err(e) = self.build() {
            eprintln!("\nerror: {e}\n");
            exit(1)
        }
    }
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(
        env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR: call the builder from build.rs"),
    )
}

fn build(kernel_crate: &Path) -> Result<(), String> {
    let root = manifest_dir();
    let out_dir =
        PathBuf::from(env::var("OUT_DIR").map_err(|_| "OUT_DIR is not set: call the builder from build.rs")?);
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let profile_dir =
        out_dir.ancestors().nth(3).ok_or("OUT_DIR is not inside a target folder")?.to_path_buf();
    let artifacts = profile_dir.join("kernels");
    let nested_target =
        profile_dir.parent().ok_or("OUT_DIR is not inside a target folder")?.join("nvptx-kernels");

    for folder in local_sources(kernel_crate)? {
        println!("cargo:rerun-if-changed={}", folder.display());
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "KERNELS_BITCODE_LINKER"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let cuda = find_cuda(&root)?;
    let linker = find_bitcode_linker()?;
    let compile =
        |cpu: &str| compile_kernels(kernel_crate, &nested_target.join(cpu), cpu, &linker, &cuda.libdevice);
    let read = |path: &Path| fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()));
    let write =
        |path: &Path, text: &str| fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()));

    fs::create_dir_all(&artifacts).map_err(|e| format!("{}: {e}", artifacts.display()))?;
    let declared = declared_kernels(&kernel_crate.join("src"))?;
    let portable: Vec<&Declared> = declared.iter().filter(|k| !k.hopper_only).collect();
    let ptx = with_launch_bounds(&read(&compile(PTX_TARGET)?)?, &portable)?;
    write(&artifacts.join("kernels.ptx"), &ptx)?;
    let cubin = match &cuda.ptxas {
        Some(ptxas) => {
            let all: Vec<&Declared> = declared.iter().collect();
            let hopper = with_launch_bounds(&read(&compile(CUBIN_ARCH)?)?, &all)?;
            let hopper_ptx = artifacts.join(format!("kernels.{CUBIN_ARCH}.ptx"));
            write(&hopper_ptx, &hopper)?;
            Some(assemble(ptxas, &hopper_ptx, &artifacts)?)
        }
        None => {
            println!(
                "cargo:warning=ptxas not found: no cubin embedded (GPUs will JIT the PTX) and no \
                 ptxas resource report; run scripts/setup.sh"
            );
            None
        }
    };
    write(&out_dir.join("kernels_embed.rs"), &embedding(&artifacts, &declared, cubin.as_ref()))?;
    let targets = match cubin {
        Some(_) => format!("PTX {PTX_TARGET} + cubin {CUBIN_ARCH}"),
        None => format!("PTX {PTX_TARGET}, no cubin"),
    };
    println!("cargo:rustc-env=KERNEL_TARGETS={targets}");
    Ok(())
}

/// The folders of the kernel crate and of every crate it depends on by path or git (the device
/// library): a change there changes the PTX. Read from `cargo metadata`'s dependency graph.
fn local_sources(kernel_crate: &Path) -> Result<Vec<PathBuf>, String> {
    let manifest = kernel_crate.join("Cargo.toml");
    let output = cargo()
        .args(["metadata", "--format-version", "1", "--offline", "--color", "never", "--manifest-path"])
        .arg(&manifest)
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata of {} failed:\n{}",
            manifest.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("cargo metadata's output: {e}"))?;
    let packages = metadata["packages"].as_array().ok_or("cargo metadata lists no packages")?;
    let manifest = manifest.canonicalize().map_err(|e| format!("{}: {e}", manifest.display()))?;
    let kernel_id = packages
        .iter()
        .find(|p| p["manifest_path"].as_str().is_some_and(|m| Path::new(m) == manifest))
        .and_then(|p| p["id"].as_str())
        .ok_or_else(|| format!("cargo metadata does not list {}", manifest.display()))?;
    let nodes = metadata["resolve"]["nodes"].as_array().ok_or("cargo metadata has no dependency graph")?;
    let mut reached = vec![kernel_id];
    let mut next = 0;
    while next < reached.len() {
        let node = nodes.iter().find(|n| n["id"].as_str() == Some(reached[next]));
        for dep in node.and_then(|n| n["dependencies"].as_array()).into_iter().flatten() {
            if let Some(id) = dep.as_str().filter(|id| !reached.contains(id)) {
                reached.push(id);
            }
        }
        next += 1;
    }
    let local = |p: &&serde_json::Value| p["source"].as_str().is_none_or(|s| s.starts_with("git+"));
    Ok(packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| reached.contains(&id)))
        .filter(local)
        .filter_map(|p| Path::new(p["manifest_path"].as_str()?).parent().map(Path::to_path_buf))
        .collect())
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

/// Runs the nested cargo build of the kernel crate for NVPTX with `.target` `cpu` and returns the PTX
/// file.
fn compile_kernels(
    kernel_crate: &Path,
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
    let mut cmd = nested_cargo(kernel_crate, "rustc", target_dir);
    cmd.args(["--lib", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core", "--crate-type", "cdylib"])
        .env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    let output = cmd.output().map_err(|e| format!("could not run cargo for the kernels: {e}"))?;
    if !output.status.success() {
        // The outer build compiles the kernel crate for the host too and reports its errors there: repeat
        // the compiler's messages only when the host build of the same code passes (code under
        // `#[cfg(target_arch = "nvptx64")]`, a backend or link error).
        if !compiles_for_host(kernel_crate, target_dir) {
            return Err(format!(
                "the GPU kernels in {} do not compile (the compiler's messages are those cargo shows \
                 for that crate)",
                kernel_crate.display()
            ));
        }
        return Err(format!(
            "the GPU kernels in {} failed to compile for nvptx64-nvidia-cuda ({cpu}):\n\n{}",
            kernel_crate.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let ptx = target_dir.join(format!("nvptx64-nvidia-cuda/release/{}.ptx", crate_name(kernel_crate)?));
    if ptx.is_file() { Ok(ptx) } else { Err(format!("the kernel build wrote no {}", ptx.display())) }
}

/// Whether the kernel crate passes `cargo check` for the host, in `target_dir` (whose proc macros the
/// NVPTX build has already compiled).
fn compiles_for_host(kernel_crate: &Path, target_dir: &Path) -> bool {
    let mut cmd = nested_cargo(kernel_crate, "check", target_dir);
    cmd.args(["--lib", "--target", &env::var("HOST").unwrap()]);
    cmd.output().is_ok_and(|output| output.status.success())
}

/// The cargo running this build.
fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `cargo SUBCOMMAND` of the release build of the kernel crate in `target_dir`, quiet, without the
/// outer build's settings (clippy's wrapper, host flags, its target).
fn nested_cargo(kernel_crate: &Path, subcommand: &str, target_dir: &Path) -> Command {
    let mut cmd = cargo();
    cmd.current_dir(kernel_crate)
        .args([subcommand, "--manifest-path", "Cargo.toml", "--release"])
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
    let report_file = artifacts.join("ptxas-report.txt");
    fs::write(&report_file, &report).map_err(|e| format!("{}: {e}", report_file.display()))?;
    // ptxas's advisories (e.g. C7514/C7515: `wgmma` serialised, waiting after every MMA) change no
    // result but cost speed silently; say them where the kernel author sees them.
    for line in report.lines().filter(|l| l.contains("Potential Performance Loss")) {
        println!("cargo:warning=ptxas: {}", line.trim_start_matches("ptxas info    : "));
    }
    Ok(Cubin { path: cubin, resources: parse_ptxas_report(&report) })
}

/// Reads `ptxas -v` output: per entry, "Compiling entry function 'NAME'", then
/// "Function properties for NAME" with "N bytes stack frame, N bytes spill stores, N bytes spill
/// loads", and "Used N registers, … N bytes smem …". The properties of the functions an entry
/// calls (listed after it, each under its own "Function properties for") are not the entry's.
fn parse_ptxas_report(report: &str) -> Vec<Resources> {
    fn number_before(line: &str, unit: &str) -> Option<u32> {
        let end = line.find(unit)?;
        line[..end].trim_end().rsplit([' ', ',']).next()?.parse().ok()
    }
    let mut all: Vec<Resources> = Vec::new();
    // Whether the "Function properties" being read are the last entry's own.
    let mut own_properties = false;
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            all.push(Resources { name, ..Default::default() });
            own_properties = false;
        } else if let Some(function) = line.split("Function properties for ").nth(1) {
            own_properties = all.last().is_some_and(|r| r.name == function.trim());
        } else if let Some(r) = all.last_mut() {
            if line.contains("stack frame") && own_properties {
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
fn declared_kernels(src: &Path) -> Result<Vec<Declared>, String> {
    let mut kernels = Vec::new();
    let mut files = Vec::new();
    rust_files(src, &mut files).map_err(|e| format!("{}: {e}", src.display()))?;
    files.sort();
    for file in &files {
        let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut marked: Option<KernelAttribute> = None;
        let mut hopper_only = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[cfg(") && line.contains("target_feature = \"sm_90a\"") {
                hopper_only = true;
            } else if let Some(attribute) = parse_kernel_attribute(line) {
                let attribute = attribute.map_err(|e| format!("{}: `{line}`: {e}", file.display()))?;
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
    Ok(kernels)
}

/// The `.rs` files under `dir`, subfolders (a family's module tree) included.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
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

/// The `kernels_embed.rs` that `gpu_launch::embedded_kernels!()` includes: a
/// `gpu_launch::EmbeddedKernels` expression naming the artifacts by absolute path.
fn embedding(artifacts: &Path, declared: &[Declared], cubin: Option<&Cubin>) -> String {
    let min_arch: u32 = PTX_TARGET.trim_start_matches("sm_").parse().expect("PTX_TARGET is sm_NN");
    let arch: u32 =
        CUBIN_ARCH.trim_start_matches("sm_").trim_end_matches('a').parse().expect("CUBIN_ARCH is sm_NN(a)");
    let path = |p: &Path| format!("{:?}", p.display().to_string());
    let cubin_bytes = match cubin {
        Some(c) => format!("Some(include_bytes!({}) as &[u8])", path(&c.path)),
        None => "None".to_string(),
    };
    let all: Vec<&str> = declared.iter().map(|k| k.name.as_str()).collect();
    let hopper: Vec<&str> = declared.iter().filter(|k| k.hopper_only).map(|k| k.name.as_str()).collect();
    let mut resources = String::new();
    for r in cubin.map(|c| c.resources.as_slice()).unwrap_or_default() {
        writeln!(
            resources,
            "        ::gpu_launch::KernelResources {{ name: {:?}, registers: {}, stack_bytes: {}, \
             spill_store_bytes: {}, spill_load_bytes: {}, static_shared_bytes: {} }},",
            r.name, r.registers, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes, r.shared_bytes
        )
        .expect("writing to a String");
    }
    format!(
        "::gpu_launch::EmbeddedKernels {{
    ptx: include_str!({ptx}),
    ptx_target: {PTX_TARGET:?},
    min_compute_capability: {min_arch},
    cubin: {cubin_bytes},
    cubin_arch: {arch},
    declared_kernels: &{all:?},
    hopper_kernels: &{hopper:?},
    ptxas_resources: &[
{resources}    ],
}}
",
        ptx = path(&artifacts.join("kernels.ptx")),
    )
}

/// The kernel crate's library name (its package name with `-` as `_`), which names its PTX file.
fn crate_name(kernel_crate: &Path) -> Result<String, String> {
    let manifest = kernel_crate.join("Cargo.toml");
    let text = fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let name = text
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| l.trim().strip_prefix("name")?.trim().strip_prefix('=').map(str::trim))
        .ok_or_else(|| format!("{}: no `name = \"…\"` under [package]", manifest.display()))?;
    Ok(name.trim_matches('"').replace('-', "_"))
}
