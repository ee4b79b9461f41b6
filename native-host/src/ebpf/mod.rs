//! qwen3-ebpf's operators as verified BPF programs inside this machine's kernel, driven from
//! Rust: each program in C under `native-host/bpf/`, compiled by build.rs with clang-19, beside
//! the small Rust module that loads it (libbpf-rs) and runs it with BPF_PROG_TEST_RUN. Outputs
//! must equal `kernels_wasm::qwen3::fixed` (the golden model) bit for bit.

pub mod cli;
pub mod forward;
pub mod gguf_model;
pub mod hf;
pub mod matvec;
pub mod models;
pub mod op_bench;
pub mod ops;
mod sys;
pub mod tokenize;

/// What went wrong on the way into the kernel, named precisely (never a silent fallback).
#[derive(Debug, thiserror::Error)]
pub enum EbpfError {
    #[error("this host cannot load BPF programs: {detail}")]
    Unavailable { detail: String },
    #[error("loading BPF program {program}: {source} (EPERM: bpf() is not allowed here, it needs CAP_BPF and CAP_PERFMON or CAP_SYS_ADMIN; EINVAL/EACCES/E2BIG/ENOMEM: the kernel's verifier refused it, its log is printed above; bpf_loop needs kernel ≥ 5.17)")]
    Load { program: &'static str, source: libbpf_rs::Error },
    #[error("BPF program {program} has no map {map:?}")]
    MissingMap { program: &'static str, map: &'static str },
    #[error("mmap of BPF map {map:?} ({bytes} bytes) failed: {source}")]
    Mmap { map: &'static str, bytes: usize, source: std::io::Error },
    #[error("BPF_PROG_TEST_RUN of {program} failed: {source}")]
    Run { program: &'static str, source: std::io::Error },
    #[error("{program} stopped early (return value {retval}): a map lookup failed inside the kernel")]
    Incomplete { program: &'static str, retval: u32 },
    #[error("{what}: expected {expected} values, got {got}")]
    Shape { what: &'static str, expected: usize, got: usize },
}

/// `Ok` if this host can load BPF programs (the capability probe), else what is missing.
pub fn require_kernel() -> Result<(), EbpfError> {
    let probe = crate::probe::ebpf();
    if probe.available {
        Ok(())
    } else {
        Err(EbpfError::Unavailable { detail: probe.detail })
    }
}
