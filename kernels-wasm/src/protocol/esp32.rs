//! The messages of an ESP32 cluster run (`esp32_run`): the plan, each node's load, every pipeline
//! step hop by hop, the tokens, and the totals. The terminal (`native-host esp32 run`), the
//! bridge and the in-page cluster all report with these.

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Most nodes one run may ask for.
pub const MAX_ESP32_NODES: u32 = 16;
/// Longest generation one request may ask for.
pub const MAX_ESP32_TOKENS: u32 = 256;
/// Longest prompt text, bytes.
pub const MAX_ESP32_PROMPT_TEXT: usize = 4 * 1024;

/// A cluster run on the bridge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Esp32Run {
    pub model: Esp32Model,
    /// Emulated nodes to start; 0: the fewest that hold the model.
    #[serde(default)]
    pub nodes: u32,
    pub prompt: String,
    pub max_tokens: u32,
    /// Each node's SRAM and PSRAM, bytes [default: 512 KiB and 8 MiB].
    #[serde(default)]
    pub sram: Option<u64>,
    #[serde(default)]
    pub psram: Option<u64>,
    /// The modelled UART, bits per second; 0: unthrottled [default: 921600].
    #[serde(default)]
    pub link_bps: Option<u64>,
}

/// Which model the bridge runs on the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Esp32Model {
    /// bitnet.cpp's own tiny model (`assets/fixtures/bitnet-cpp/`).
    Fixture,
    /// A dummy of bitnet.cpp's layouts (`125M`, `tiny`, …), made by the host and cached.
    Dummy { size: String, quant: String },
    /// A GGUF file under the bridge's models directory.
    Path { path: String },
}

/// One node as planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodePlan {
    pub name: String,
    pub emulated: bool,
    /// Blocks `first..first + count`.
    pub first: u32,
    pub count: u32,
    pub sram_budget: u64,
    pub psram_budget: u64,
    /// SRAM for the largest batch the node will get.
    pub sram_need: u64,
    pub weights: u64,
    pub kv_cache: u64,
    pub clock_hz: u64,
    pub link_bps: u64,
    /// Most activation rows per forward within its SRAM.
    pub max_rows: u32,
}

/// One node's part of a pipeline step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub node: u32,
    pub rows: u32,
    /// Modelled on the board: compute (cost model) and the link both ways.
    pub compute_us: u64,
    pub link_us: u64,
    /// What the emulation took on this host, link included.
    pub wall_us: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Frames sent again after damage or silence.
    pub resends: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Esp32Event {
    /// `prompt`: the prompt as its tokens decode (echoed before the generated text).
    Plan { model: String, prompt: String, layers: u32, nodes: Vec<NodePlan> },
    /// A node holds its weights (`bytes` sent, the modelled UART time for them).
    Loaded { node: u32, bytes: u64, link_us: u64, wall_us: u64 },
    /// Positions `pos..pos + rows` went through the pipeline (the prompt in batches, then one
    /// token a step).
    Step { pos: u32, hops: Vec<Hop> },
    /// `bytes`: the token's piece exactly (a piece may be part of a UTF-8 character); `text`:
    /// the same, lossily decoded.
    Token { index: u32, id: u32, text: String, bytes: Vec<u8> },
}

/// What a node says of itself at the end of a run (its `stats` answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: u32,
    pub forwards: u64,
    /// Damaged frames it received, and answers it sent again for repeated requests.
    pub corrupt_in: u64,
    pub resent: u64,
    pub sram_used: u64,
    pub psram_used: u64,
    pub modelled_us: u64,
    pub wall_us: u64,
}

/// The totals of a run. Modelled figures are for the boards; wall figures for this emulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Esp32Summary {
    pub tokens: Vec<u32>,
    pub text: String,
    pub prompt_tokens: u32,
    /// Generated tokens per second on the modelled boards, and the link's share of that time.
    pub modelled_tok_s: f64,
    pub link_share: f64,
    pub wall_tok_s: f64,
    pub resends: u64,
    /// Each node's own account.
    #[serde(default)]
    pub nodes: Vec<NodeReport>,
}
