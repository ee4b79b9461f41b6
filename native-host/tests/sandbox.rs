//! The sandbox the host starts children in, checked from inside a child: its capabilities,
//! identity, network, limits, and which files it can open. The kernel's own answers
//! (/proc/self/status, EACCES) are the reference.

mod common;

use native_host::sandbox::{self, Limits, Sandbox, SandboxError};
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMITS: Limits = Limits { cpu_seconds: 7, address_space: 1 << 30, file_size: 1 << 20, open_files: 32 };

/// A shell that may run `cat` and `ls`, plus `read` and `write`.
fn shell(read: Vec<PathBuf>, write: Vec<PathBuf>, network: bool) -> Sandbox {
    let mut exec = Vec::new();
    for tool in ["sh", "cat", "ls"] {
        exec.extend(sandbox::program_files(&sandbox::which(tool).unwrap()).unwrap());
    }
    Sandbox { exec, read, write, network, limits: LIMITS }
}

fn sh(sandbox: &Sandbox, script: &str) -> sandbox::Output {
    let mut cmd = sandbox.command(&sandbox::which("sh").unwrap()).unwrap();
    cmd.args(["-c", script]);
    sandbox::run(cmd, Duration::from_secs(20), 1 << 20, 1 << 16).unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn status_field<'a>(status: &'a str, key: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).unwrap_or_else(|| panic!("no {key} in {status}"))
}

#[test]
fn children_have_no_capabilities_no_privileges_and_no_network() {
    let s = shell(vec![PathBuf::from("/proc")], vec![], false);
    let out = sh(&s, "cat /proc/self/status; echo NET; cat /proc/self/net/dev");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all = text(&out.stdout);
    let (status, net) = all.split_once("NET\n").unwrap();
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        assert_eq!(status_field(status, cap), "0000000000000000", "{cap}");
    }
    assert_eq!(status_field(status, "NoNewPrivs:"), "1");
    let uid: Vec<&str> = status_field(status, "Uid:").split_whitespace().collect();
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(uid, ["65534"; 4], "a root host's child runs as nobody");
        assert_eq!(status_field(status, "Groups:"), "", "no supplementary groups");
    } else {
        assert!(!uid.contains(&"0"), "{uid:?}");
    }
    // A fresh network namespace: loopback only (and down).
    let interfaces: Vec<&str> = net.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).collect();
    assert_eq!(interfaces, ["lo"], "{net}");
    // The host's own namespace, seen from the host: more than loopback, or at least not the same one.
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let theirs = sh(&s, "ls -l /proc/self/ns/net");
    assert!(!text(&theirs.stdout).contains(&ours.display().to_string()), "same network namespace as the host");
}

#[test]
fn children_open_only_what_their_rules_name() {
    let c = common::canary();
    let (secret_path, secret) = (&c.path, c.secret.as_str());
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(secret_path, work.path().join("link")).unwrap();
    let s = shell(vec![], vec![work.path().to_path_buf()], false);
    let p = secret_path.display();
    let w = work.path().display();
    let script = format!(
        "cat {p}; cat /proc/self/root{p}; cat {w}/link; cat /etc/passwd; ls {dir}; \
         echo x > {dir}/new; echo inside > {w}/ok && cat {w}/ok",
        dir = secret_path.parent().unwrap().display()
    );
    let out = sh(&s, &script);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stdout.contains(secret) && !stderr.contains(secret), "{stdout}{stderr}");
    assert_eq!(stderr.matches("Permission denied").count(), 6, "each read or write outside is refused:\n{stderr}");
    assert_eq!(stdout.trim(), "inside", "its own directory is writable");
    assert!(!secret_path.with_file_name("new").exists());
}

#[test]
fn limits_hold_and_are_named() {
    let s = shell(vec![], vec![], false);
    let out = sh(&s, "ulimit -t; ulimit -v; ulimit -f; ulimit -n");
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    // dash prints -v and -f in KiB and 512-byte blocks respectively.
    assert_eq!(lines, ["7", &(LIMITS.address_space >> 10).to_string(), &(LIMITS.file_size >> 9).to_string(), "32"]);

    let mut cmd = s.command(Path::new("/bin/sh")).unwrap();
    cmd.args(["-c", "while :; do echo 0123456789abcdef; done"]);
    match sandbox::run(cmd, Duration::from_secs(20), 4096, 4096) {
        Err(SandboxError::TooMuchOutput { stream: "stdout", limit: 4096, .. }) => {}
        other => panic!("{other:?}"),
    }
    let mut cmd = s.command(Path::new("/bin/sh")).unwrap();
    cmd.args(["-c", "while :; do :; done"]);
    let started = std::time::Instant::now();
    match sandbox::run(cmd, Duration::from_millis(500), 4096, 4096) {
        Err(e @ SandboxError::Timeout { .. }) => assert!(e.to_string().contains("killed"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_missing_rule_path_is_named() {
    let s = Sandbox {
        exec: vec![PathBuf::from("/nonexistent/tool")],
        read: vec![],
        write: vec![],
        network: false,
        limits: LIMITS,
    };
    let e = s.command(Path::new("/bin/sh")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/tool"), "{e}");
}
