//! Capability probes: can this process load BPF programs, and is clang-19 here?
//!
//! The eBPF probe does what the engine will do, on the smallest scale: it loads a two-instruction
//! socket-filter program with `bpf(BPF_PROG_LOAD)`. Success proves the syscall, the verifier and
//! our privileges; the errno on failure says which of them is missing.

use kernels_wasm::protocol::{Capabilities, ProbeResult};
use std::process::Command;

pub fn capabilities() -> Capabilities {
    Capabilities { ebpf: ebpf(), clang: clang() }
}

pub fn clang() -> ProbeResult {
    match Command::new("clang-19").arg("--version").output() {
        Ok(out) if out.status.success() => ProbeResult {
            available: true,
            detail: String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("clang-19").trim().to_string(),
        },
        Ok(out) => ProbeResult { available: false, detail: format!("clang-19 --version exited with {}", out.status) },
        Err(e) => ProbeResult {
            available: false,
            detail: format!("clang-19 not runnable ({e}); install Debian package clang-19"),
        },
    }
}

#[cfg(target_os = "linux")]
pub fn ebpf() -> ProbeResult {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
    // r0 = 0; exit. Each instruction: opcode u8, dst/src regs u8, offset i16, immediate i32.
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = b"GPL\0";
    // The leading fields of `union bpf_attr` for BPF_PROG_LOAD; the kernel requires the rest zero.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_SOCKET_FILTER.to_ne_bytes());
    attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    // SAFETY: attr is a valid, zero-padded bpf_attr whose pointers outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, attr.as_mut_ptr(), attr.len()) };
    if fd >= 0 {
        // SAFETY: fd is the program fd the kernel just returned to us.
        unsafe { libc::close(fd as libc::c_int) };
        return ProbeResult {
            available: true,
            detail: format!("bpf(BPF_PROG_LOAD) works (kernel {})", kernel_release()),
        };
    }
    let err = std::io::Error::last_os_error();
    let why = match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "needs CAP_BPF (or root), or kernel.unprivileged_bpf_disabled blocks it"
        }
        Some(libc::ENOSYS) => "the kernel has no bpf() syscall (CONFIG_BPF_SYSCALL off) or a seccomp filter blocks it",
        Some(libc::EINVAL) => "the kernel rejected the program (too old?)",
        _ => "unexpected error",
    };
    ProbeResult { available: false, detail: format!("bpf(BPF_PROG_LOAD) failed: {err} — {why}") }
}

#[cfg(not(target_os = "linux"))]
pub fn ebpf() -> ProbeResult {
    ProbeResult { available: false, detail: "in-kernel eBPF needs Linux".into() }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe must agree with an independent check: whether this process holds CAP_BPF or
    /// CAP_SYS_ADMIN (bits 39 and 21 of CapEff) decides whether a privileged load can work.
    #[test]
    fn ebpf_probe_agrees_with_capabilities() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let cap_eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        let privileged = cap_eff & (1 << 39) != 0 || cap_eff & (1 << 21) != 0;
        let unprivileged_allowed = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
            .map(|s| s.trim() == "0")
            .unwrap_or(false);
        let result = ebpf();
        if !privileged && !unprivileged_allowed {
            assert!(!result.available, "{result:?}");
        }
        if privileged {
            assert!(result.available, "{result:?}");
        }
        assert!(!result.detail.is_empty());
    }

    #[test]
    fn clang_probe_matches_path_lookup() {
        let on_path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("clang-19").is_file()))
            .unwrap_or(false);
        let result = clang();
        assert_eq!(result.available, on_path, "{result:?}");
        if result.available {
            assert!(result.detail.contains("19"), "{result:?}");
        }
    }
}
