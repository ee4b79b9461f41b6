//! `cargo xtask serve` and `cargo xtask test`: everything from a fresh machine to a running
//! playground, or to every test run. Each step says what it does and how long it took; a failing
//! step says which one and how to fix it.

mod fetch;
mod fuzz;
mod logged;
mod procs;
mod serve;
mod setup;
mod test;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "substrates: set-up, serve and test")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install what is missing, build, and run the bridge (127.0.0.1:8787) and playground (127.0.0.1:8080).
    Serve(serve::Args),
    /// Install what is missing and run every test: native, wasm in headless Chromium, end to end.
    Test(test::Args),
    /// The bridge under hostile load (32 clients, loopback only) for two minutes, with its table.
    Soak {
        /// How long [default: 120 s; `cargo xtask test` runs 20 s of it].
        #[arg(long, default_value_t = 120)]
        seconds: u32,
    },
    /// Refresh docs/screenshots (the README's pictures of each tab) from the e2e suite's tab tour.
    Screenshots,
    /// Time the BitNet kernels in headless Chromium (wasm scalar vs simd128) and print a table.
    WasmBench,
    /// Only install the prerequisites (what serve and test do first).
    Setup {
        /// Also install what the tests need (Chromium, ChromeDriver, the e2e node packages).
        #[arg(long)]
        test: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Test(args) => test::run(args),
        Command::WasmBench => test::wasm_bench(),
        Command::Screenshots => test::screenshots(),
        Command::Soak { seconds } => fuzz::soak(seconds),
        Command::Setup { test } => {
            setup::prerequisites(if test { setup::For::Test } else { setup::For::Serve }).map(drop)
        }
    };
    if let Err(e) = result {
        eprintln!("\nxtask: error: {e:#}");
        std::process::exit(1);
    }
}

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."))
}

/// A step header, so long runs show where they are.
pub fn step(what: &str) {
    println!("\n==> {what}");
}
