//! One module per tab.

pub mod bitnet;
pub mod components;
pub mod ebpf;
pub mod esp32;
pub mod qwengpu;
pub mod qwengpu_chat;
pub mod qwengpu_layers;
pub mod qwengpu_spliced;
