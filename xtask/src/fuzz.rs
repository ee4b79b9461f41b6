//! `cargo xtask test --only fuzz` and `cargo xtask soak`: the campaigns kept out of the default run.
//!
//! Fuzzing is coverage-guided (cargo fuzz, libFuzzer, the nightly toolchain). The default native
//! suite already replays every committed corpus through the same target functions without
//! libFuzzer; this suite builds the instrumented targets, replays the corpora through them and
//! gives each a short run.

use crate::setup::timed;
use crate::{root, step};
use anyhow::{bail, Context, Result};
use std::process::Command;

/// Seconds of fuzzing per target in the short run.
pub const SHORT_RUN_S: u32 = 20;

/// The targets, as `fuzz/Cargo.toml` names them.
pub fn targets() -> Result<Vec<String>> {
    let manifest = std::fs::read_to_string(root().join("fuzz/Cargo.toml")).context("reading fuzz/Cargo.toml")?;
    let names: Vec<String> = manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|bin| {
            bin.lines().find_map(|l| l.trim().strip_prefix("name = \"")?.strip_suffix('"').map(String::from))
        })
        .collect();
    if names.is_empty() {
        bail!("fuzz/Cargo.toml lists no [[bin]] targets");
    }
    Ok(names)
}

pub fn run(seconds: u32) -> Result<()> {
    cargo_fuzz()?;
    let dir = root().join("fuzz");
    // One target/ for the workspace: the instrumented build lives beside the others.
    let target_dir = root().join("target/fuzz");
    let targets = targets()?;
    step("writing the generated seeds (binary formats, from the project's encoders) to fuzz/corpus/*/gen-*");
    timed(
        "cargo test -p native-host --lib fuzz::tests::write_generated_seeds -- --ignored",
        Command::new("cargo")
            .args(["test", "-p", "native-host", "--lib", "fuzz::tests::write_generated_seeds", "--", "--ignored"])
            .current_dir(root()),
    )?;
    step(&format!("building {} fuzz targets (cargo +nightly fuzz build)", targets.len()));
    timed(
        "cargo +nightly fuzz build",
        Command::new("cargo").args(["+nightly", "fuzz", "build", "--target-dir"]).arg(&target_dir).current_dir(&dir),
    )?;
    let mut failed = Vec::new();
    for t in &targets {
        step(&format!("fuzz {t}: the corpus, then {seconds} s of fuzzing"));
        let corpus = dir.join("corpus").join(t);
        std::fs::create_dir_all(&corpus)?;
        // New inputs go to a scratch corpus, so the committed one changes only on purpose.
        let scratch = target_dir.join("corpus").join(t);
        std::fs::create_dir_all(&scratch)?;
        let status = crate::logged::status(
            &format!("cargo fuzz run {t}"),
            Command::new("cargo")
                .args(["+nightly", "fuzz", "run", "--target-dir"])
                .arg(&target_dir)
                .arg(t)
                .arg(&scratch)
                .arg(&corpus)
                .args(["--", &format!("-max_total_time={seconds}"), "-print_final_stats=1"])
                .current_dir(&dir),
        )?;
        if !status.success() {
            failed.push(t.clone());
        }
    }
    if !failed.is_empty() {
        bail!("fuzz targets failed (the crash inputs are in fuzz/artifacts/): {}", failed.join(", "));
    }
    Ok(())
}

/// cargo-fuzz, installed once (it drives libFuzzer on the nightly toolchain).
fn cargo_fuzz() -> Result<()> {
    let has = Command::new("cargo").args(["+nightly", "fuzz", "--version"]).output().is_ok_and(|o| o.status.success());
    if has {
        println!("  ok  cargo-fuzz");
        return Ok(());
    }
    crate::setup::nightly()?;
    println!("  ..  cargo-fuzz: installing (typically ~2 min on 2 cores)");
    timed("cargo install cargo-fuzz --locked", Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
}

/// `cargo xtask soak`: the bridge's full two-minute soak, its table on stdout.
pub fn soak(seconds: u32) -> Result<()> {
    crate::setup::prerequisites(crate::setup::For::Test)?;
    step(&format!("the bridge under hostile load for {seconds} s: cargo test -p native-host --test soak"));
    timed(
        "cargo test -p native-host --test soak -- --nocapture",
        Command::new("cargo")
            .args(["test", "-p", "native-host", "--test", "soak", "--", "--nocapture"])
            .env("SUBSTRATES_SOAK_SECS", seconds.to_string())
            .current_dir(root()),
    )
}
