//! The playground's pure logic: no DOM, no Leptos, so it is tested natively by
//! `cargo test --workspace` and in headless Chromium by wasm-bindgen-test.

pub mod bitnet;
pub mod bitnet_model;
pub mod ebpf;
pub mod esp32;
pub mod heatmap;
pub mod link;
pub mod plot;
pub mod qwengpu;
pub mod qwengpu_chat;
pub mod qwengpu_spliced;
// WebGPU exists only in the page.
#[cfg(target_arch = "wasm32")]
pub mod qwengpu_spliced_gpu;
pub mod steps;
pub mod timeline;
pub mod token;
pub mod virtual_list;
