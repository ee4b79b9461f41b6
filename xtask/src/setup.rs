//! Prerequisites, installed only when missing: the wasm32 target, Debian packages (as root),
//! trunk 0.21.14, wasm-bindgen-cli at the version Cargo.lock pins, the e2e node packages.

use crate::{root, step};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

pub const TRUNK_VERSION: &str = "0.21.14";
/// clang-19 compiles the eBPF programs (native-host's build.rs) and CUDA → PTX; libbpf-sys builds
/// its vendored libbpf against libelf and zlib.
/// mesa-vulkan-drivers is Mesa lavapipe: a Vulkan adapter for the GPU kernels on a machine without a GPU.
const SERVE_PACKAGES: &[&str] = &["clang-19", "libelf-dev", "zlib1g-dev", "pkg-config", "mesa-vulkan-drivers"];
/// Headless browser tests; NEON kernels cross-compiled and run under qemu.
const TEST_PACKAGES: &[&str] = &["chromium", "chromium-driver", "qemu-user", "gcc-aarch64-linux-gnu"];
/// The NEON tests' Rust target.
pub const AARCH64: &str = "aarch64-unknown-linux-gnu";
/// The ESP32-C3's ISA: the ESP32 node program must build for it.
pub const RISCV32: &str = "riscv32imc-unknown-none-elf";

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum For {
    Serve,
    Test,
}

/// Paths of the tools the other commands run.
pub struct Tools {
    pub trunk: PathBuf,
    pub wasm_bindgen_test_runner: PathBuf,
    /// The official Qwen3 tokenizer.json (tests only).
    pub qwen3_tokenizer: Option<PathBuf>,
    /// SmolLM2-135M-Instruct GGUF: the eBPF tab's default model and the accuracy gates' model.
    pub smollm2: PathBuf,
}

pub fn prerequisites(purpose: For) -> Result<Tools> {
    step("checking prerequisites (each is installed only if missing)");
    rust_target("wasm32-unknown-unknown")?;
    if purpose == For::Test {
        rust_target(AARCH64)?;
        rust_target(RISCV32)?;
    }
    let mut packages = SERVE_PACKAGES.to_vec();
    if purpose == For::Test {
        packages.extend_from_slice(TEST_PACKAGES);
    }
    debian_packages(&packages)?;
    let trunk =
        cargo_tool("trunk", TRUNK_VERSION, &["install", "trunk", "--version", TRUNK_VERSION, "--locked"], "~8 min")?;
    let bindgen = wasm_bindgen_version()?;
    // Without --locked: the registry mirror lacks some of wasm-bindgen-cli's locked dependency versions.
    let wasm_bindgen = cargo_tool(
        "wasm-bindgen",
        &bindgen,
        &["install", "wasm-bindgen-cli", "--version", &bindgen, "--force"],
        "~4 min",
    )?;
    let mut qwen3_tokenizer = None;
    if purpose == For::Test {
        node_packages()?;
        qwen3_tokenizer = Some(crate::fetch::fetch(&crate::fetch::QWEN3_TOKENIZER)?);
    }
    let smollm2 = crate::fetch::fetch(&crate::fetch::SMOLLM2)?;
    Ok(Tools {
        trunk,
        wasm_bindgen_test_runner: wasm_bindgen.with_file_name("wasm-bindgen-test-runner"),
        qwen3_tokenizer,
        smollm2,
    })
}

pub fn timed(what: &str, cmd: &mut Command) -> Result<()> {
    println!("    running: {what}");
    let start = Instant::now();
    let status = crate::logged::status(what, cmd)?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    println!("    done in {:.0?}", start.elapsed());
    Ok(())
}

fn rust_target(target: &str) -> Result<()> {
    let out = Command::new("rustup").args(["target", "list", "--installed"]).output().with_context(|| {
        format!("rustup not found: install Rust with rustup (https://rustup.rs), or add {target} to your toolchain")
    })?;
    if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == target) {
        println!("  ok  rust target {target}");
        return Ok(());
    }
    println!("  ..  rust target {target}: installing");
    timed(&format!("rustup target add {target}"), Command::new("rustup").args(["target", "add", target]))
}

/// Whether this CPU runs the AVX-512 kernels natively (F, BW, VBMI, VNNI, as `Backend::Avx512`).
pub fn host_has_avx512() -> bool {
    host_has(&["avx512f", "avx512bw", "avx512vbmi", "avx512_vnni"])
}

/// Whether this CPU has AMX-INT8 (so the native suite's GEMMs took AMX, not VNNI).
pub fn host_has_amx() -> bool {
    host_has(&["amx_tile", "amx_int8"])
}

/// Whether /proc/cpuinfo lists every one of `features` for the first CPU.
fn host_has(features: &[&str]) -> bool {
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let first = flags.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    features.iter().all(|f| first.split_whitespace().any(|x| x == *f))
}

/// The nightly toolchain (cargo fuzz needs it), installed minimal if missing.
pub fn nightly() -> Result<()> {
    let has = Command::new("rustup").args(["run", "nightly", "rustc", "--version"]).output();
    if has.is_ok_and(|o| o.status.success()) {
        println!("  ok  nightly toolchain");
        return Ok(());
    }
    println!("  ..  nightly toolchain: installing");
    timed(
        "rustup toolchain install nightly --profile minimal",
        Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]),
    )
}

/// Miri on the nightly toolchain, for checking the AVX-512 kernels on CPUs without AVX-512.
/// `Err` says why it is not available; the caller reports that suite as failed.
pub fn miri() -> Result<()> {
    let has = |what: &str| {
        Command::new("rustup")
            .args(["component", "list", "--installed", "--toolchain", "nightly"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.starts_with(what)))
            .unwrap_or(false)
    };
    if has("miri") && has("rust-src") {
        println!("  ok  nightly toolchain with miri and rust-src");
        return Ok(());
    }
    println!("  ..  miri (nightly): installing");
    timed(
        "rustup toolchain install nightly --profile minimal --component miri,rust-src",
        Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
            "--component",
            "miri,rust-src",
        ]),
    )
}

pub fn debian_packages(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            let status = Command::new("dpkg-query").args(["-W", "-f=${Status}", p]).output();
            !matches!(status, Ok(o) if String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect();
    for p in packages.iter().filter(|p| !missing.contains(p)) {
        println!("  ok  debian package {p}");
    }
    if missing.is_empty() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "missing Debian packages: {}. Not root, so not installing them; run: sudo apt-get install -y {}",
            missing.join(" "),
            missing.join(" ")
        );
    }
    println!("  ..  debian packages {}: installing", missing.join(" "));
    timed("apt-get update", Command::new("apt-get").args(["update", "-q"]))?;
    timed(
        &format!("apt-get install -y {}", missing.join(" ")),
        Command::new("apt-get").args(["install", "-y", "-q"]).args(&missing).env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// `name --version` must print `version`; otherwise `cargo <install_args>`.
fn cargo_tool(name: &str, version: &str, install_args: &[&str], typical: &str) -> Result<PathBuf> {
    let path = find_tool(name);
    let installed =
        Command::new(&path).arg("--version").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    if let Some(v) = &installed {
        if v.split_whitespace().nth(1) == Some(version) {
            println!("  ok  {name} {version}");
            return Ok(path);
        }
    }
    let why = match installed {
        Some(v) => format!("found {}, need {version}", v.trim()),
        None => "not installed".into(),
    };
    println!(
        "  ..  {name} {version}: {why}; installing (cargo {}, typically {typical} on 2 cores)",
        install_args.join(" ")
    );
    timed(&format!("cargo {}", install_args.join(" ")), Command::new("cargo").args(install_args))?;
    let path = find_tool(name);
    if !path.exists() && path.components().count() > 1 {
        bail!("{name} was installed but is not at {}; add cargo's bin directory to PATH", path.display());
    }
    Ok(path)
}

/// On PATH, else in cargo's bin directory (a fresh shell may not have it on PATH yet).
fn find_tool(name: &str) -> PathBuf {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    match cargo_home {
        Some(home) => home.join("bin").join(name),
        None => PathBuf::from(name),
    }
}

/// The wasm-bindgen version Cargo.lock pins; the CLI must match it exactly.
pub fn wasm_bindgen_version() -> Result<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).context("reading Cargo.lock")?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"wasm-bindgen\"" {
            if let Some(v) = lines.next().and_then(|l| l.trim().strip_prefix("version = \"")) {
                return Ok(v.trim_end_matches('"').to_string());
            }
        }
    }
    bail!("Cargo.lock has no wasm-bindgen entry")
}

fn node_packages() -> Result<()> {
    let dir = root().join("web/e2e");
    let lock = std::fs::read_to_string(dir.join("package-lock.json")).context("reading web/e2e/package-lock.json")?;
    let installed = std::fs::read_to_string(dir.join("node_modules/playwright-core/package.json")).unwrap_or_default();
    let wanted = package_version(&lock, "node_modules/playwright-core");
    if wanted.is_some() && wanted == package_version(&installed, "") {
        println!("  ok  npm playwright-core {}", wanted.unwrap_or_default());
        return Ok(());
    }
    println!("  ..  npm packages of web/e2e: installing (npm ci)");
    timed("npm ci (web/e2e)", Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir))
}

/// The `"version"` after `section` in a package(-lock).json, found without a JSON parser.
fn package_version(json: &str, section: &str) -> Option<String> {
    let start = if section.is_empty() { 0 } else { json.find(&format!("\"{section}\""))? };
    let rest = &json[start..];
    let v = rest.find("\"version\"")?;
    let after = &rest[v + 9..];
    let open = after.find('"')? + 1;
    let close = after[open..].find('"')? + open;
    Some(after[open..close].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockfile_pins_the_wasm_bindgen_the_web_crate_uses() {
        let v = wasm_bindgen_version().unwrap();
        assert!(v.starts_with("0.2."), "{v}");
    }

    #[test]
    fn package_versions_are_read() {
        let lock = r#"{"packages":{"":{"devDependencies":{"playwright-core":"1.64.1"}},"node_modules/playwright-core":{"version":"1.64.1","x":1}}}"#;
        assert_eq!(package_version(lock, "node_modules/playwright-core").as_deref(), Some("1.64.1"));
        assert_eq!(package_version(r#"{"name":"p","version":"2.0.0"}"#, "").as_deref(), Some("2.0.0"));
        assert_eq!(package_version("{}", ""), None);
    }
}
