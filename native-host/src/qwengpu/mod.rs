//! `native-host qwengpu`: CUDA C → PTX with the host's clang-19, then PTX → qwenGPU machine
//! blocks (`kernels_wasm::qwengpu::lower`), and runs on the reference interpreter.

pub mod bench;
pub mod nvcc;

use anyhow::{bail, Context, Result};
use kernels_wasm::protocol::MAX_CUDA_BYTES;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::lower::{compile as lower, Kernel};
use std::path::{Path, PathBuf};
use std::process::Command;

/// clang's arguments for the machine's PTX (the command line; `-S` writes PTX text).
pub const CLANG_ARGS: [&str; 6] =
    ["--cuda-device-only", "--cuda-gpu-arch=sm_75", "-nocudainc", "-nocudalib", "-O2", "-S"];

/// CUDA C → PTX text, with `assets/kernels/` (our `qwengpu.h`) on the include path.
pub fn cuda_to_ptx(cu: &Path, include: &Path) -> Result<String> {
    let clang = std::env::var("BPF_CLANG").unwrap_or_else(|_| "clang-19".into());
    let out = std::env::temp_dir().join(format!("substrates-qwengpu-{}.ptx", std::process::id()));
    let result = Command::new(&clang)
        .args(CLANG_ARGS)
        .arg("-I")
        .arg(include)
        .arg(cu)
        .arg("-o")
        .arg(&out)
        .output()
        .with_context(|| format!("running {clang} (install it with `cargo xtask setup`: Debian clang-19)"))?;
    if !result.status.success() {
        bail!("{clang} could not compile {}:\n{}", cu.display(), String::from_utf8_lossy(&result.stderr));
    }
    let ptx = std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let _ = std::fs::remove_file(&out);
    Ok(ptx)
}

/// Why CUDA source from the bridge was not compiled.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the CUDA source is {0} bytes; the limit is {MAX_CUDA_BYTES}")]
    TooLarge(usize),
    #[error("line {0}: only `#include \"qwengpu.h\"` may be included (the bridge reads no other file)")]
    Include(usize),
    #[error("clang-19 refused the source:\n{0}")]
    Compiler(String),
    #[error("clang-19 took longer than {0} s")]
    Timeout(u64),
    #[error("{0}")]
    Io(String),
}

/// CUDA source from the bridge → PTX. It is compiled in a fresh private directory with no
/// system headers (`-nostdlibinc`; clang's own CUDA builtins stay), and any directive that could make clang read a file other than
/// our `qwengpu.h` (`#include`, `#include_next`, `#import`, `#embed`, `__has_include`, also as
/// `%:` digraphs or split by line continuations) is refused first, so the compiler's messages
/// can never show another file.
pub fn cuda_source_to_ptx(source: &str) -> Result<String, SourceError> {
    if source.len() > MAX_CUDA_BYTES {
        return Err(SourceError::TooLarge(source.len()));
    }
    for (i, line) in source.replace("\\\r\n", "").replace("\\\n", "").lines().enumerate() {
        let t = line.trim_start();
        let directive = t.strip_prefix('#').or_else(|| t.strip_prefix("%:")).map(|d| d.trim_start());
        let reads = directive.is_some_and(|d| ["include", "import", "embed"].iter().any(|k| d.starts_with(k)));
        let allowed = t.split_whitespace().collect::<Vec<_>>() == ["#include", "\"qwengpu.h\""];
        if (reads && !allowed) || line.contains("__has_include") {
            return Err(SourceError::Include(i + 1));
        }
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("substrates-cuda-{}-{n}", std::process::id()));
    let io = |e: std::io::Error| SourceError::Io(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let result = (|| {
        let (cu, ptx) = (dir.join("kernel.cu"), dir.join("kernel.ptx"));
        std::fs::write(&cu, source).map_err(io)?;
        let clang = std::env::var("BPF_CLANG").unwrap_or_else(|_| "clang-19".into());
        let mut child = Command::new(&clang)
            .args(CLANG_ARGS)
            .arg("-nostdlibinc")
            .arg("-I")
            .arg(kernels_dir())
            .arg(&cu)
            .arg("-o")
            .arg(&ptx)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| SourceError::Io(format!("running {clang}: {e}")))?;
        // Read the diagnostics on the side, so a full pipe never stalls clang.
        let mut pipe = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(p) = pipe.as_mut() {
                use std::io::Read;
                let _ = p.read_to_string(&mut text);
            }
            text
        });
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().map_err(io)? {
                break s;
            }
            if started.elapsed() > std::time::Duration::from_secs(CLANG_TIMEOUT_S) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SourceError::Timeout(CLANG_TIMEOUT_S));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let stderr = reader.join().unwrap_or_default();
        if !status.success() {
            return Err(SourceError::Compiler(stderr.replace(&dir.display().to_string(), ".")));
        }
        std::fs::read_to_string(&ptx).map_err(io)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

const CLANG_TIMEOUT_S: u64 = 30;

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

pub fn compile(args: CompileArgs) -> Result<()> {
    let spec = MachineSpec::default();
    let ptx = if args.file.extension().is_some_and(|e| e == "ptx") {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?
    } else {
        cuda_to_ptx(&args.file, &kernels_dir())?
    };
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
