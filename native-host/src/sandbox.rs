//! Every child process the host starts on a client's behalf (clang-19 on CUDA source, the emulated
//! ESP32 nodes) runs inside a sandbox that the kernel enforces, so what the child can do does not
//! depend on what its input looks like:
//!
//! - **Files**: Landlock (ABI 6 or later) allows only the paths named here: the program and the
//!   shared libraries the dynamic loader resolves for it (read and execute), the read-only data it
//!   needs, and its own private directory (read and write). Every other open, execute, create or
//!   remove fails with `EACCES`, root or not. Landlock checks the resolved object, so a symlink or a
//!   `/proc/self/…` path leads nowhere new.
//! - **Identity**: a bridge running as root hands the child uid/gid 65534 (nobody) with no
//!   supplementary groups; otherwise the child keeps the caller's uid in a fresh user namespace. In
//!   both cases the bounding, ambient, permitted and effective capability sets are emptied and
//!   `no_new_privs` is set, so nothing (setuid binaries, file capabilities) can give them back.
//! - **Network**: when the child needs none, a fresh network namespace (no interface up) and
//!   Landlock's TCP rules (bind and connect refused) together leave it no way out.
//! - **Signals and abstract sockets**: Landlock scopes (ABI 6) keep it from signalling or connecting
//!   to anything outside its domain.
//! - **Limits**: CPU seconds, address space, file size and open files by `setrlimit`; the wall
//!   clock and the size of what it prints by [`run`]. The child is its own process group and dies
//!   with the thread that started it (`PR_SET_PDEATHSIG`), so none outlives the host.
//!
//! Where any of this cannot be set up, the child is not started: the error names what is missing.
//! Nothing falls back to running unsandboxed.
//!
//! `pre_exec` runs between `fork` and `exec` in a copy of a multi-threaded process, where only
//! async-signal-safe calls are allowed: the Landlock ruleset is built in the parent, and the child
//! side is raw system calls on values prepared beforehand.

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The oldest Landlock the sandbox accepts: ABI 4 brought TCP rules, ABI 6 the scopes (Linux 6.12).
pub const LANDLOCK_ABI: ABI = ABI::V6;
/// The identity a root host gives its children (Debian's nobody / nogroup).
pub const NOBODY: u32 = 65534;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "the kernel cannot enforce the sandbox, so the child was not started: Landlock ABI {wanted} \
         is needed (ABI 6 is Linux 6.12, with `landlock` among the LSMs) and this kernel offers {}: \
         {detail}", if *offered > 0 { format!("ABI {offered}") } else { "none".to_string() }
    )]
    Landlock { wanted: i32, offered: i32, detail: String },
    #[error("sandbox rule for {path}: {why}")]
    Path { path: PathBuf, why: String },
    #[error(
        "{program}: could not be started in its sandbox ({source}); the child sets up a network \
         namespace, resource limits, uid {NOBODY} (as root) or a user namespace, drops every \
         capability, sets no_new_privs and enters Landlock, and one of these was refused"
    )]
    Spawn { program: String, source: std::io::Error },
    #[error("{program} ran past its {0:?} limit and was killed", limit)]
    Timeout { program: String, limit: Duration },
    #[error("{program} printed more than {limit} bytes on {stream} and was killed")]
    TooMuchOutput { program: String, stream: &'static str, limit: usize },
    #[error("{program}: {source}")]
    Io { program: String, source: std::io::Error },
}

/// `setrlimit` values for the child.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub cpu_seconds: u64,
    pub address_space: u64,
    pub file_size: u64,
    pub open_files: u64,
}

/// What one child may touch.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Read and execute: the program, its libraries, the loader.
    pub exec: Vec<PathBuf>,
    /// Read only (files or directory trees).
    pub read: Vec<PathBuf>,
    /// Read and write (directory trees), owned by the child's uid when the host is root.
    pub write: Vec<PathBuf>,
    /// Whether the child keeps the host's network (the ESP32 nodes listen on loopback).
    pub network: bool,
    pub limits: Limits,
}

/// What the child does between `fork` and `exec`, prepared in the parent.
struct ChildSetup {
    ruleset: OwnedFd,
    root: bool,
    network: bool,
    limits: Limits,
}

impl Sandbox {
    /// `program` with `args`, ready to spawn inside this sandbox: empty environment, stdin from
    /// /dev/null, its own process group.
    pub fn command(&self, program: &Path) -> Result<Command, SandboxError> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let ruleset = self.ruleset()?;
        if root {
            for dir in &self.write {
                std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY))
                    .map_err(|e| SandboxError::Path { path: dir.clone(), why: format!("chown to {NOBODY}: {e}") })?;
            }
        }
        let setup = ChildSetup { ruleset, root, network: self.network, limits: self.limits };
        let mut cmd = Command::new(program);
        cmd.env_clear().stdin(Stdio::null()).process_group(0);
        // SAFETY: the closure makes only async-signal-safe system calls on values prepared above.
        unsafe { cmd.pre_exec(move || setup.enter()) };
        Ok(cmd)
    }

    fn ruleset(&self) -> Result<OwnedFd, SandboxError> {
        self.ruleset_for(LANDLOCK_ABI)
    }

    /// The ruleset, every right of `abi` handled; an older kernel is an error, never a weaker sandbox.
    fn ruleset_for(&self, abi: ABI) -> Result<OwnedFd, SandboxError> {
        let ll = |e: landlock::RulesetError| SandboxError::Landlock {
            wanted: abi as i32,
            offered: kernel_landlock_abi(),
            detail: e.to_string(),
        };
        let fs = AccessFs::from_all(abi);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(fs)
            .map_err(ll)?
            .scope(Scope::from_all(abi))
            .map_err(ll)?;
        if !self.network {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi)).map_err(ll)?;
        }
        let mut created = ruleset.create().map_err(ll)?;
        let read = AccessFs::ReadFile | AccessFs::ReadDir;
        let rules = [(&self.exec, read | AccessFs::Execute), (&self.read, read), (&self.write, fs)];
        for (paths, access) in rules {
            for path in paths {
                let bad = |why: String| SandboxError::Path { path: path.clone(), why };
                let fd = PathFd::new(path).map_err(|e| bad(e.to_string()))?;
                // Directory-only rights on a file are an error under HardRequirement.
                let access = if path.is_dir() { access } else { access & AccessFs::from_file(abi) };
                created = created.add_rule(PathBeneath::new(fd, access)).map_err(|e| bad(e.to_string()))?;
            }
        }
        Option::<OwnedFd>::from(created).ok_or_else(|| SandboxError::Landlock {
            wanted: abi as i32,
            offered: kernel_landlock_abi(),
            detail: "the kernel did not create a ruleset".into(),
        })
    }
}

/// The Landlock ABI this kernel offers (0: none), as `landlock_create_ruleset` reports it.
pub fn kernel_landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: the version query takes no ruleset and writes nothing.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    v.max(0) as i32
}

impl ChildSetup {
    /// In the child, after `fork`: only raw system calls.
    fn enter(&self) -> std::io::Result<()> {
        let check = |r: libc::c_long| if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
        // SAFETY (the whole block): plain system calls with valid arguments; no allocation.
        unsafe {
            if !self.network || !self.root {
                // As root a network namespace needs no user namespace; otherwise the user namespace
                // is what makes the other namespaces possible.
                let mut flags = if self.network { 0 } else { libc::CLONE_NEWNET };
                if !self.root {
                    flags |= libc::CLONE_NEWUSER;
                }
                check(libc::unshare(flags) as _)?;
            }
            let limit = |what, v: u64| {
                let l = libc::rlimit { rlim_cur: v, rlim_max: v };
                check(libc::setrlimit(what, &l) as _)
            };
            limit(libc::RLIMIT_CPU, self.limits.cpu_seconds)?;
            limit(libc::RLIMIT_AS, self.limits.address_space)?;
            limit(libc::RLIMIT_FSIZE, self.limits.file_size)?;
            limit(libc::RLIMIT_NOFILE, self.limits.open_files)?;
            limit(libc::RLIMIT_CORE, 0)?;
            // The bounding set, while CAP_SETPCAP is still held (EINVAL past the kernel's last cap).
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && *libc::__errno_location() != libc::EINVAL {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if self.root {
                check(libc::setgroups(0, std::ptr::null()) as _)?;
                check(libc::setresgid(NOBODY, NOBODY, NOBODY) as _)?;
                // Leaving uid 0 clears the permitted and effective sets.
                check(libc::setresuid(NOBODY, NOBODY, NOBODY) as _)?;
            }
            check(libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) as _)?;
            let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
            let data = [CapData::default(); 2];
            check(libc::syscall(libc::SYS_capset, &header, data.as_ptr()))?;
            // After the credential change: a parent-death signal is reset by setuid.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as _)?;
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as _)?;
            check(libc::syscall(libc::SYS_landlock_restrict_self, self.ruleset.as_raw_fd(), 0))?;
        }
        Ok(())
    }
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// What a sandboxed child left behind.
#[derive(Debug)]
pub struct Output {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Spawns `cmd` (from [`Sandbox::command`]) and waits for it, reading at most `max_out` bytes of
/// stdout and `max_err` of stderr; past either, or past `wall`, its process group is killed.
pub fn run(mut cmd: Command, wall: Duration, max_out: usize, max_err: usize) -> Result<Output, SandboxError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| SandboxError::Spawn { program: program.clone(), source })?;
    let pid = child.id() as libc::pid_t;
    // SAFETY: the child leads its own group (process_group(0)), and the group's id stays reserved
    // until the leader is reaped, which only happens below, after the last kill.
    let kill = move || unsafe { libc::kill(-pid, libc::SIGKILL) };
    // Both pipes are read on their own threads, so a child filling one never stalls on the other;
    // a reader past its limit kills the group, so the child cannot block on a full pipe.
    let reader = |pipe: Option<Box<dyn Read + Send>>, limit: usize| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(p) = pipe {
                // One byte past the limit tells "exactly the limit" from "more".
                let _ = p.take(limit as u64 + 1).read_to_end(&mut buf);
                if buf.len() > limit {
                    kill();
                }
            }
            let _ = tx.send(buf);
        });
        rx
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _), max_out);
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _), max_err);
    let started = Instant::now();
    let timed_out = loop {
        if exited(pid) {
            break false;
        }
        if started.elapsed() > wall {
            break true;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Whatever the leader did, nothing of its group outlives it (and holds the pipes open).
    kill();
    let status = child.wait().map_err(|source| SandboxError::Io { program: program.clone(), source })?;
    // A process that left the group could still hold a pipe: wait a moment, not forever.
    let (stdout, stderr) = match (out.recv_timeout(PIPE_GRACE), err.recv_timeout(PIPE_GRACE)) {
        (Ok(o), Ok(e)) => (o, e),
        _ => {
            let why = "a process it started left its group and holds its output open";
            return Err(SandboxError::Io { program, source: std::io::Error::other(why) });
        }
    };
    if timed_out {
        return Err(SandboxError::Timeout { program, limit: wall });
    }
    for (stream, data, limit) in [("stdout", &stdout, max_out), ("stderr", &stderr, max_err)] {
        if data.len() > limit {
            return Err(SandboxError::TooMuchOutput { program, stream, limit });
        }
    }
    Ok(Output { status, stdout, stderr })
}

/// How long the output pipes may stay open once the child's group is dead.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Whether `pid` has exited, without reaping it (`WNOWAIT`).
fn exited(pid: libc::pid_t) -> bool {
    // SAFETY: waitid writes only into `info`.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        // With WNOHANG and nothing to report, si_pid stays 0; an error means there is no such child.
        r < 0 || info.si_pid() != 0
    }
}

/// The dynamic loader of this architecture's executables.
#[cfg(target_arch = "x86_64")]
const LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
#[cfg(target_arch = "aarch64")]
const LOADER: &str = "/lib/ld-linux-aarch64.so.1";

/// Where Debian keeps shared libraries; only the loader's listing runs with these readable.
const LIBRARY_DIRS: [&str; 4] = ["/lib", "/lib64", "/usr/lib", "/usr/lib64"];

/// The files `program` needs in order to start: itself, the loader, its loader cache and each
/// shared library the loader resolves for it (`ld.so --list`, itself run sandboxed with only the
/// library directories readable).
pub fn program_files(program: &Path) -> Result<Vec<PathBuf>, SandboxError> {
    let program =
        program.canonicalize().map_err(|e| SandboxError::Path { path: program.to_path_buf(), why: e.to_string() })?;
    let mut exec: Vec<PathBuf> = LIBRARY_DIRS.iter().map(PathBuf::from).filter(|p| p.exists()).collect();
    exec.push(program.clone());
    let lister = Sandbox { exec, read: vec![], write: vec![], network: false, limits: Limits::SMALL };
    let mut cmd = lister.command(Path::new(LOADER))?;
    cmd.arg("--list").arg(&program);
    let out = run(cmd, Duration::from_secs(10), 1 << 16, 1 << 16)?;
    if !out.status.success() {
        return Err(SandboxError::Path {
            path: program,
            why: format!("{LOADER} --list: {} {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    let mut files = vec![program, PathBuf::from(LOADER)];
    if Path::new("/etc/ld.so.cache").exists() {
        files.push(PathBuf::from("/etc/ld.so.cache"));
    }
    files.extend(String::from_utf8_lossy(&out.stdout).lines().filter_map(library_path));
    files.sort();
    files.dedup();
    Ok(files)
}

/// `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)` → the path; the vDSO has none.
fn library_path(line: &str) -> Option<PathBuf> {
    let line = line.trim();
    let path = line.split_once(" => ").map_or(line, |(_, p)| p);
    let path = path.rsplit_once(" (").map_or(path, |(p, _)| p);
    path.starts_with('/').then(|| PathBuf::from(path))
}

impl Limits {
    /// For short helpers such as the loader's listing.
    pub const SMALL: Limits = Limits { cpu_seconds: 10, address_space: 1 << 30, file_size: 0, open_files: 64 };
}

/// `name` as `Command` would find it on `PATH` (or as given, when it has a slash).
pub fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel older than the sandbox needs is refused with both ABIs named, never run weaker:
    /// asked for the newest ABI the crate knows, this kernel (if it lacks it) must say no.
    #[test]
    fn a_kernel_without_the_needed_landlock_is_refused_by_name() {
        let newest = ABI::V10;
        let offered = kernel_landlock_abi();
        if offered >= newest as i32 {
            eprintln!("SKIPPED: this kernel offers Landlock ABI {offered}, the newest the crate knows");
            return;
        }
        let s = Sandbox { exec: vec![], read: vec![], write: vec![], network: false, limits: Limits::SMALL };
        match s.ruleset_for(newest) {
            Err(e @ SandboxError::Landlock { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("Landlock ABI {}", newest as i32)), "{text}");
                assert!(text.contains("was not started"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert!(offered >= LANDLOCK_ABI as i32, "this kernel offers ABI {offered}: the sandbox cannot run here");
    }

    #[test]
    fn loader_lines_give_library_paths() {
        let lines = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibgone.so => not found";
        let got: Vec<PathBuf> = lines.lines().filter_map(library_path).collect();
        assert_eq!(
            got,
            [PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"), PathBuf::from("/lib64/ld-linux-x86-64.so.2")]
        );
    }
}
