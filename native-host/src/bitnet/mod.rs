//! `native-host bitnet …`: bitnet.cpp's flow on our kernels.
//!
//! - [`kernel_bench`]: GEMV/GEMM kernels per format and backend.
//! - [`dummy`]: `bitnet dummy`, the dummy layouts written as GGUF (generate-dummy-bitnet-model.py).
//! - [`convert`]: `bitnet convert`, an f32/f16 BitNet GGUF (or, through [`hf`], a Hugging Face
//!   checkpoint) to I2_S, TL1 or TL2.
//! - [`run`]: `bitnet run`, streamed generation and `--cnv` chat (run_inference.py).
//! - [`bench`]: `bitnet bench`, pp/tg tokens per second as llama-bench prints them (e2e_benchmark.py).
//! - [`kl`]: `bitnet kl`, the drift of a model's next-token distributions from a base model's.

pub mod bench;
pub mod convert;
pub mod dummy;
pub mod hf;
pub mod kernel_bench;
pub mod kl;
pub mod run;

use anyhow::{Context, Result};
use kernels_wasm::bitnet::blob::Shared;
use kernels_wasm::bitnet::model::{load, Model};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// A forward pass allocates its activation buffers afresh, megabytes each when a 512-token
/// prompt runs as one batch. glibc serves such sizes with mmap and unmaps them on free, so each
/// pass page-faulted and zeroed them again: 16–20 % of pp512 on the 125M model (`perf`: page
/// faults, clear_page, unmap). Raising the mmap and trim thresholds keeps freed buffers in the
/// heap for the next pass; peak RSS is unchanged (the same buffers, reused).
pub fn keep_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before the model's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 512 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Opens a model: its file read into memory that Linux backs with 2 MiB pages
/// ([`resident`]), or with `SUBSTRATES_MMAP=1` memory-mapped and read in place.
pub fn open(path: &Path) -> Result<Model> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let shared: Shared = if mapped() {
        // SAFETY: the map is read-only; a file truncated underneath us is the one way to fault,
        // as with any reader of a file others can write.
        Arc::new(unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("mapping {}", path.display()))?)
    } else {
        resident(file).with_context(|| format!("reading {}", path.display()))?
    };
    load::load(shared).with_context(|| format!("{} is not a BitNet model this runtime reads", path.display()))
}

/// Whether [`open`] maps files (`SUBSTRATES_MMAP=1`) rather than reading them in.
pub fn mapped() -> bool {
    std::env::var_os("SUBSTRATES_MMAP").is_some_and(|v| v != "0")
}

/// The whole file in an anonymous mapping advised `MADV_HUGEPAGE`. Generation reads every weight
/// once per token: through a file map's 4 KiB pages that is a TLB miss every 4 KiB (a two-level
/// page walk in a VM); on 2 MiB pages 1.5B generation ran 25 % faster (`bitnet bench`,
/// 2026-12-02, 34.5–35.5 → 43.2–44.3 tok/s). Where the kernel gives no huge
/// pages this is a plain read into memory. Resident memory is the file's size either way, as a
/// map's is once generation has touched every page.
fn resident(mut file: std::fs::File) -> Result<Shared> {
    use std::io::Read;
    let len =
        usize::try_from(file.metadata()?.len()).context("the file is larger than this machine's address space")?;
    if len == 0 {
        return Ok(Arc::new(Vec::<u8>::new()));
    }
    let mut memory = memmap2::MmapMut::map_anon(len).context("reserving memory for the weights")?;
    #[cfg(target_os = "linux")]
    // Advice only: a kernel without transparent huge pages keeps 4 KiB pages.
    let _ = memory.advise(memmap2::Advice::HugePage);
    file.read_exact(&mut memory)?;
    Ok(Arc::new(memory.make_read_only()?))
}

/// Peak resident memory of this process (`VmHWM`), in bytes.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

/// Progress of a long write on stderr: a bar (`indicatif`) on a terminal; elsewhere (CI logs,
/// pipes), where a redrawn bar would pile up copies, one line every few seconds and one at the
/// end.
pub struct Progress {
    /// Holds the position and the total too, drawn or not.
    bar: indicatif::ProgressBar,
    /// Off a terminal: when the last line was printed.
    logged: Option<std::time::Instant>,
}

/// Seconds between progress lines off a terminal.
const LOG_EVERY_S: u64 = 5;

impl Progress {
    pub fn new(total: u64) -> Progress {
        let bar = indicatif::ProgressBar::new(total.max(1));
        bar.set_style(
            indicatif::ProgressStyle::with_template("[{bar:25}] {percent:>3} % {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("## "),
        );
        // `indicatif` draws nothing where stderr is not a terminal.
        let logged = bar.is_hidden().then(std::time::Instant::now);
        Progress { bar, logged }
    }

    pub fn add(&mut self, n: u64, what: &str) {
        if n == 0 {
            return;
        }
        let total = self.bar.length().unwrap_or(1);
        let done = (self.bar.position() + n).min(total);
        self.bar.set_message(what.to_string());
        self.bar.set_position(done);
        let finished = done >= total;
        if let Some(last) = &mut self.logged {
            if finished || last.elapsed().as_secs() >= LOG_EVERY_S {
                *last = std::time::Instant::now();
                eprintln!("{:3} % ({} of {} MiB) {what}", done * 100 / total, done >> 20, total >> 20);
            }
        }
        if finished {
            self.bar.finish();
        }
    }
}

/// Writes `path` through a temporary file renamed into place at the end, so a failed or
/// interrupted write never leaves a file that looks complete.
pub fn write_atomically(
    path: &Path,
    f: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<()>,
) -> Result<()> {
    let tmp = path.with_extension("partial");
    let file = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let result = f(&mut w).and_then(|()| w.flush().context("writing"));
    match result {
        Ok(()) => std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display())),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
