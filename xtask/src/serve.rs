//! `cargo xtask serve`: the bridge on 127.0.0.1:8787 and the playground (trunk serve, which
//! proxies /ws to the bridge) on 127.0.0.1:8080, until Ctrl-C.

use crate::procs::{self, Proc};
use crate::setup::{self, For};
use crate::{root, step};
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub const BRIDGE_PORT: u16 = 8787;
pub const WEB_PORT: u16 = 8080;

#[derive(clap::Args)]
pub struct Args {
    /// Directory of models the bridge may read (passed to `native-host serve --models-dir`)
    /// [default: the fetched SmolLM2's cache directory, the eBPF tab's default model].
    #[arg(long)]
    models_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let tools = setup::prerequisites(For::Serve)?;
    procs::ensure_free(BRIDGE_PORT, "is `cargo xtask serve` or `native-host serve` already running?")?;
    procs::ensure_free(WEB_PORT, "is `cargo xtask serve` or `trunk serve` already running?")?;
    let native_host = build_native_host()?;
    procs::catch_signals();

    step(&format!("starting the bridge on 127.0.0.1:{BRIDGE_PORT}"));
    let mut cmd = Command::new(&native_host);
    cmd.args(["serve", "--bind", &format!("127.0.0.1:{BRIDGE_PORT}")]);
    let models_dir = args.models_dir.clone().or_else(|| tools.smollm2.parent().map(PathBuf::from));
    if let Some(dir) = &models_dir {
        cmd.arg("--models-dir").arg(dir);
    }
    let mut bridge = Proc::spawn("bridge", &mut cmd)?;
    let token = bridge
        .wait_for_line("session token: ", Duration::from_secs(60))?
        .trim_start_matches("session token: ")
        .trim()
        .to_string();

    step(&format!("building and serving the playground on 127.0.0.1:{WEB_PORT} (the first build compiles Leptos for wasm32: a few minutes)"));
    let mut web = Proc::spawn(
        "trunk",
        Command::new(&tools.trunk)
            .args(["serve", "--offline"])
            .current_dir(root())
            .env("PATH", procs::path_with(&tools.trunk)),
    )?;
    procs::wait_http_ok(&mut web, WEB_PORT, Duration::from_secs(30 * 60))?;

    println!();
    println!("  playground:  http://127.0.0.1:{WEB_PORT}/?token={token}");
    println!("  bridge:      ws://127.0.0.1:{BRIDGE_PORT}/ws (the playground reaches it through ws://127.0.0.1:{WEB_PORT}/ws)");
    println!("  token:       {token}");
    println!("  Ctrl-C stops both.");
    println!();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        if procs::stop_requested() {
            break;
        }
        bridge.check_alive()?;
        web.check_alive()?;
    }
    step("stopping the playground and the bridge");
    web.stop();
    bridge.stop();
    println!("stopped.");
    Ok(())
}

/// Builds the bridge and returns the path of its binary.
pub fn build_native_host() -> Result<PathBuf> {
    step("building native-host (cargo build -p native-host)");
    let status = crate::logged::status(
        "cargo build -p native-host",
        Command::new("cargo").args(["build", "-p", "native-host"]).current_dir(root()),
    )?;
    if !status.success() {
        bail!("building native-host failed; the compiler's messages are above");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    Ok(target.join("debug/native-host"))
}
