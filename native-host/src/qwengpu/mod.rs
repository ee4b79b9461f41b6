//! `native-host qwengpu`: CUDA C → PTX with the host's clang-19, then PTX → qwenGPU machine
//! blocks (`kernels_wasm::qwengpu::lower`), and runs on the reference interpreter.

pub mod alu;
pub mod bench;
pub mod carry;
pub mod chat;
pub mod checkpoint;
pub mod conversation;
pub mod drift;
pub mod nvcc;
pub mod run;
pub mod source;

pub use source::{cuda_source_to_ptx, Filter, SourceError};

use anyhow::{bail, Context, Result};
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::lower::{compile as lower, Kernel};
use std::path::{Path, PathBuf};
use std::process::Command;

/// clang's arguments for the machine's PTX (the command line; `-S` writes PTX text).
pub const CLANG_ARGS: [&str; 6] =
    ["--cuda-device-only", "--cuda-gpu-arch=sm_75", "-nocudainc", "-nocudalib", "-O2", "-S"];

/// The compiler to run: `$BPF_CLANG`, else `clang-19` (the build script compiles BPF C with it too).
pub fn clang_name() -> String {
    std::env::var("BPF_CLANG").unwrap_or_else(|_| "clang-19".into())
}

/// CUDA C → PTX text, with `assets/kernels/` (our `qwengpu.h`) on the include path. This is the
/// CLI's compile of the user's own file, with the user's rights; the bridge compiles clients'
/// source with [`cuda_source_to_ptx`], sandboxed.
pub fn cuda_to_ptx(cu: &Path, include: &Path) -> Result<String> {
    let clang = clang_name();
    let result = Command::new(&clang)
        .args(CLANG_ARGS)
        .arg("-I")
        .arg(include)
        .arg(cu)
        .args(["-o", "-"])
        .output()
        .with_context(|| format!("running {clang} (install it with `cargo xtask setup`: Debian clang-19)"))?;
    if !result.status.success() {
        bail!("{clang} could not compile {}:\n{}", cu.display(), String::from_utf8_lossy(&result.stderr));
    }
    String::from_utf8(result.stdout).with_context(|| format!("{clang} wrote PTX that is not UTF-8"))
}

/// The repository's `assets/kernels/` (for `qwengpu.h`).
pub fn kernels_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/kernels")
}

#[derive(clap::Args)]
pub struct CompileArgs {
    /// A CUDA C file (.cu), or PTX (.ptx) to lower as it is.
    file: PathBuf,
    /// The entry to take when the file has several kernels.
    #[arg(long)]
    kernel: Option<String>,
    /// Write the PTX here too.
    #[arg(long)]
    ptx: Option<PathBuf>,
}

/// A `.ptx` file's text, or a CUDA file's PTX from clang-19.
pub fn read_ptx(file: &Path) -> Result<String> {
    if file.extension().is_some_and(|e| e == "ptx") {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
    } else {
        cuda_to_ptx(file, &kernels_dir())
    }
}

pub fn compile(args: CompileArgs) -> Result<()> {
    let spec = MachineSpec::default();
    let ptx = read_ptx(&args.file)?;
    if let Some(p) = &args.ptx {
        std::fs::write(p, &ptx).with_context(|| format!("writing {}", p.display()))?;
    }
    let kernel: Kernel =
        lower(&ptx, args.kernel.as_deref(), &spec).with_context(|| format!("lowering {}", args.file.display()))?;
    println!(
        "{}: {} of {} ROM blocks, {} parameters ({}), {} bytes of shared memory",
        kernel.name,
        kernel.program.blocks.len(),
        spec.rom_blocks,
        kernel.params.len(),
        kernel.params.join(", "),
        kernel.shared_bytes
    );
    for (i, (block, line)) in kernel.program.blocks.iter().zip(&kernel.rom_lines).enumerate() {
        println!("  block {i:>2} (PTX line {line}):");
        for inst in block {
            println!("      {inst:?}");
        }
    }
    Ok(())
}
