//! BitNet b1.58 across a cluster of ESP32-S3 boards: each node holds a contiguous range of
//! blocks, the coordinator holds the embedding and the output layer and passes activations
//! from node to node.
//!
//! - [`wire`]: the framing (`A5 5A | ver | cmd | seq | len | payload | CRC16`).
//! - [`msg`]: hello/capabilities, assignment, weight chunks, commit, forward, stats, reset.
//! - [`budget`]: what a range of blocks needs in SRAM and PSRAM, and the split of a model.
//! - [`cost`]: operations counted per forward and their modelled time on the board.
//! - [`node`]: the node program (`no_std`; it builds for `riscv32imc-unknown-none-elf`).
//! - [`coord`]: the coordinator, over any byte [`coord::Link`].
//! - [`local`]: a node in the same process (the browser tab, tests).

pub mod budget;
pub mod coord;
pub mod cost;
pub mod local;
pub mod msg;
pub mod node;
pub mod wire;

pub use coord::{Cluster, Link, LinkError, Peer, Timing};
pub use node::Node;

use crate::bitnet::model::ModelError;
use alloc::string::String;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Esp32Error {
    /// An assignment or a batch that does not fit a node's memory, with the numbers.
    #[error("over budget: {0}")]
    Budget(String),
    /// A request the node cannot take (out of order, malformed, inconsistent).
    #[error("{0}")]
    Protocol(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A node failed, went silent or refused: which one, and what it was doing.
    #[error("node {node}: {why}")]
    Node { node: String, why: String },
}

impl From<crate::gguf::GgufError> for Esp32Error {
    fn from(e: crate::gguf::GgufError) -> Esp32Error {
        Esp32Error::Model(e.into())
    }
}

#[cfg(test)]
mod tests;
