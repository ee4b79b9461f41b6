//! The native host: a websocket bridge that lets the playground drive what a browser cannot
//! (in-kernel eBPF, serial-attached ESP32 boards), plus the project's command-line tools.
//!
//! - [`bridge`]: the websocket server (`native-host serve`).
//! - [`probe`]: what this machine can do (eBPF, clang-19), reported in the hello.
//! - [`files`]: the only way the bridge opens files: inside the models directory or `assets/`.
//! - [`bitnet`]: `native-host bitnet …`: kernel bench, dummy models, convert, run, bench.
//! - [`esp32`]: `native-host esp32 node|run`: BitNet blocks across ESP32-S3 nodes (emulated or on serial).
//! - [`qwengpu`]: `native-host qwengpu compile`: CUDA → PTX → qwenGPU machine blocks.
//! - [`token`]: the session token the page must present.

pub mod bitnet;
pub mod bridge;
pub mod ebpf;
pub mod esp32;
pub mod files;
pub mod fuzz;
pub mod gpu;
pub mod probe;
pub mod qwengpu;
pub mod sandbox;
pub mod token;

/// Prints a line to stdout, ignoring a closed pipe: a bridge whose log reader went away keeps
/// serving instead of panicking inside `println!`.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Like [`say!`], on stderr.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
