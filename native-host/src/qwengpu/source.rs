//! CUDA source from a client → PTX, with clang-19 inside [`crate::sandbox`].
//!
//! What keeps host files out of the reply is the sandbox, not a reading of the source: C
//! preprocessing has too many ways to name a file (macros, splices, digraphs, `_Pragma`, `#embed`
//! parameters…) for a textual filter to be complete. The child can read only its toolchain (the
//! clang binary, the libraries the loader resolves for it, its resource headers) and its own fresh
//! directory, which holds the source and a copy of `qwengpu.h`. It writes the PTX to a pipe, so the
//! host reads no path the child could have replaced.
//!
//! The line filter ([`Filter::On`], the default) stays for a friendlier message; the tests pass
//! with it off.

use crate::sandbox::{self, Limits, Sandbox, SandboxError};
use kernels_wasm::protocol::MAX_CUDA_BYTES;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The header every kernel includes, copied into each compile's directory.
const QWENGPU_H: &str = include_str!("../../../assets/kernels/qwengpu.h");
/// Compiles at once; more are answered `busy` (each is a clang process of ~100 MB).
pub const MAX_COMPILES: usize = 4;
pub const CLANG_TIMEOUT: Duration = Duration::from_secs(30);
/// PTX of a 64 KiB source is far below this.
const MAX_PTX_BYTES: usize = 8 << 20;
const MAX_DIAGNOSTIC_BYTES: usize = 64 << 10;
const LIMITS: Limits = Limits { cpu_seconds: 30, address_space: 4 << 30, file_size: 16 << 20, open_files: 64 };

/// Why CUDA source from the bridge was not compiled.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the CUDA source is {0} bytes; the limit is {MAX_CUDA_BYTES}")]
    TooLarge(usize),
    #[error("line {0}: only `#include \"qwengpu.h\"` may be included (the bridge reads no other file)")]
    Include(usize),
    #[error("clang-19 refused the source:\n{0}")]
    Compiler(String),
    #[error("{MAX_COMPILES} compiles are already running; try again")]
    Busy,
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{0}")]
    Io(String),
}

/// Whether the line filter runs before the compiler (the sandbox always does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    On,
    Off,
}

/// CUDA source → PTX text.
pub fn cuda_source_to_ptx(source: &str, filter: Filter) -> Result<String, SourceError> {
    compile_planted(source, filter, &|_| Ok(()))
}

/// As [`cuda_source_to_ptx`], with `plant` called on the compile's directory before clang starts
/// (the tests plant symlinks there).
#[doc(hidden)]
pub fn compile_planted(
    source: &str,
    filter: Filter,
    plant: &dyn Fn(&Path) -> std::io::Result<()>,
) -> Result<String, SourceError> {
    if source.len() > MAX_CUDA_BYTES {
        return Err(SourceError::TooLarge(source.len()));
    }
    if filter == Filter::On {
        check_includes(source)?;
    }
    let _slot = Slot::take()?;
    let clang = toolchain()?;
    // A fresh directory with an unguessable name, 0700: nobody else can have planted anything in it.
    let dir = tempfile::Builder::new()
        .prefix("substrates-cuda-")
        .tempdir()
        .map_err(|e| SourceError::Io(format!("creating a compile directory: {e}")))?;
    let io = |e: std::io::Error| SourceError::Io(format!("{}: {e}", dir.path().display()));
    for (name, text) in [("kernel.cu", source), ("qwengpu.h", QWENGPU_H)] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).map_err(io)?;
        // Readable by the child's uid whatever the host's umask.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(io)?;
    }
    plant(dir.path()).map_err(io)?;
    let sandbox = Sandbox {
        exec: clang.files.clone(),
        read: vec![clang.resource_dir.clone()],
        write: vec![dir.path().to_path_buf()],
        network: false,
        limits: LIMITS,
    };
    let mut cmd = sandbox.command(&clang.program)?;
    cmd.args(super::CLANG_ARGS).args(["-nostdlibinc", "kernel.cu", "-o", "-"]).current_dir(dir.path());
    let out = sandbox::run(cmd, CLANG_TIMEOUT, MAX_PTX_BYTES, MAX_DIAGNOSTIC_BYTES)?;
    // The TempDir removes the directory (without following links) on every path out of here.
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr).replace(&dir.path().display().to_string(), ".");
        return Err(SourceError::Compiler(text));
    }
    String::from_utf8(out.stdout).map_err(|_| SourceError::Io("clang-19 wrote PTX that is not UTF-8".into()))
}

/// The friendly first line of defence: directives that would read a file other than `qwengpu.h`.
fn check_includes(source: &str) -> Result<(), SourceError> {
    for (i, line) in source.replace("\\\r\n", "").replace("\\\n", "").lines().enumerate() {
        let t = line.trim_start();
        let directive = t.strip_prefix('#').or_else(|| t.strip_prefix("%:")).map(|d| d.trim_start());
        let reads = directive.is_some_and(|d| ["include", "import", "embed"].iter().any(|k| d.starts_with(k)));
        let allowed = t.split_whitespace().collect::<Vec<_>>() == ["#include", "\"qwengpu.h\""];
        if (reads && !allowed) || line.contains("__has_include") {
            return Err(SourceError::Include(i + 1));
        }
    }
    Ok(())
}

/// One of the [`MAX_COMPILES`] places, given back on drop.
struct Slot;

static ACTIVE: AtomicUsize = AtomicUsize::new(0);

impl Slot {
    fn take() -> Result<Slot, SourceError> {
        ACTIVE
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_COMPILES).then_some(n + 1))
            .map(|_| Slot)
            .map_err(|_| SourceError::Busy)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the sandboxed clang may read and run.
#[derive(Debug)]
pub struct Toolchain {
    pub program: PathBuf,
    /// The binary, the loader, its cache and the libraries.
    pub files: Vec<PathBuf>,
    /// Its own headers (`__clang_cuda_builtin_vars.h` and the like).
    pub resource_dir: PathBuf,
}

/// clang-19 (or `$BPF_CLANG`) and what it needs, found once (sandboxed, like every run of it).
pub fn toolchain() -> Result<Arc<Toolchain>, SourceError> {
    static FOUND: Mutex<Option<Arc<Toolchain>>> = Mutex::new(None);
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = found.as_ref() {
        return Ok(t.clone());
    }
    let name = super::clang_name();
    let program = sandbox::which(&name)
        .ok_or_else(|| SourceError::Io(format!("{name} is not on PATH (install it with `cargo xtask setup`)")))?;
    let files = sandbox::program_files(&program)?;
    let probe = Sandbox { exec: files.clone(), read: vec![], write: vec![], network: false, limits: LIMITS };
    let mut cmd = probe.command(&program)?;
    cmd.arg("-print-resource-dir");
    let out = sandbox::run(cmd, CLANG_TIMEOUT, 4096, MAX_DIAGNOSTIC_BYTES)?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !Path::new(&dir).is_dir() {
        return Err(SourceError::Io(format!(
            "{name} -print-resource-dir gave {dir:?} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let t = Arc::new(Toolchain { program, files, resource_dir: PathBuf::from(dir) });
    *found = Some(t.clone());
    Ok(t)
}
