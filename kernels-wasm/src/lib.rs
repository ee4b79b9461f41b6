//! The substrates kernel library.
//!
//! It builds for `wasm32-unknown-unknown` (the playground) and natively (the `native-host`
//! bridge), and its core depends on neither a browser nor an operating system: it is `no_std` +
//! `alloc` unless the default `std` feature is on.
//!
//! Modules:
//! - [`bitnet`]: BitNet b1.58 ternary kernels (I2_S, TL1, TL2) and whole models.
//! - [`esp32`]: BitNet blocks across ESP32-S3 nodes: the node program, the wire, the coordinator.
//! - [`gguf`]: the llama.cpp model format: parse, dequantise, write.
//! - `gpu` (feature `gpu`): the kernels as WGSL compute shaders through wgpu (Vulkan, WebGPU).
//! - [`qwengpu`]: the qwenGPU SIMT machine: its instruction set and reference interpreter.
//! - [`protocol`]: every message that crosses the playground ↔ bridge websocket, defined once and
//!   used by both sides.
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod bitnet;
pub mod esp32;
pub mod gguf;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod protocol;
pub mod qwen3;
pub mod qwengpu;
