//! The raw pieces libbpf-rs does not wrap the way the operators need them: shared mappings of
//! mmapable array maps, a test run callable from several threads at once (a program fd is just a
//! number; the kernel serialises nothing), and the verifier's instruction count.

use super::EbpfError;
use libbpf_rs::libbpf_sys;
use std::os::fd::RawFd;

/// A `MAP_SHARED` mapping of a `BPF_F_MMAPABLE` array map: what the host writes here the next
/// program run reads, and what the program writes the host reads after the run returns.
pub struct MapMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through &self / &mut self.
unsafe impl Send for MapMemory {}
unsafe impl Sync for MapMemory {}

impl MapMemory {
    /// Maps `bytes` of the map behind `fd` (array maps lay entries out `round_up(value, 8)` apart).
    pub fn new(fd: RawFd, bytes: usize, map: &'static str) -> Result<Self, EbpfError> {
        let len = bytes.max(1).div_ceil(4096) * 4096;
        // SAFETY: a fresh shared mapping of a map fd; failure is checked.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(EbpfError::Mmap { map, bytes: len, source: std::io::Error::last_os_error() });
        }
        Ok(MapMemory { ptr: ptr.cast(), len })
    }

    pub fn as_i32(&self) -> &[i32] {
        // SAFETY: page-aligned, `len` bytes mapped for as long as self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.cast(), self.len / 4) }
    }

    pub fn as_i32_mut(&mut self) -> &mut [i32] {
        // SAFETY: as above, and &mut self is the only writer on the host side.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len / 4) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len) }
    }

    pub fn as_u32_mut(&mut self) -> &mut [u32] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len / 4) }
    }
}

impl Drop for MapMemory {
    fn drop(&mut self) {
        // SAFETY: exactly the region mmap returned.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One BPF_PROG_TEST_RUN on a 64-byte packet whose bytes 14..18 (right after the Ethernet header
/// the kernel strips for socket filters) carry `slot`. Returns the program's return value and the
/// kernel-measured duration in nanoseconds.
pub fn test_run(prog_fd: RawFd, slot: u32, program: &'static str) -> Result<(u32, u32), EbpfError> {
    let mut packet = [0u8; 64];
    packet[14..18].copy_from_slice(&slot.to_ne_bytes());
    // SAFETY: zeroed is a valid bpf_test_run_opts; sz tells libbpf which fields exist.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
    opts.data_in = packet.as_ptr().cast();
    opts.data_size_in = packet.len() as u32;
    opts.repeat = 1;
    // SAFETY: opts points at live data for the duration of the call.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog_fd, &mut opts) };
    if rc != 0 {
        return Err(EbpfError::Run { program, source: std::io::Error::from_raw_os_error(-rc) });
    }
    Ok((opts.retval, opts.duration))
}

/// Instructions the verifier processed to accept the program (`bpf_prog_info.verified_insns`).
pub fn verified_insns(prog_fd: RawFd) -> Option<u32> {
    // SAFETY: zeroed bpf_prog_info is valid input; the kernel fills at most `len` bytes.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog_fd, &mut info, &mut len) };
    (rc == 0).then_some(info.verified_insns)
}
