//! The messages of an in-kernel Qwen3 run (`ebpf_run`): which model, the tokens as they are
//! chosen, the trace of every BPF call, the verifier's statistics.

use alloc::string::String;
use serde::{Deserialize, Serialize};

/// Longest generation one request may ask for.
pub const MAX_EBPF_TOKENS: u32 = 512;
/// Longest prompt, in tokens.
pub const MAX_EBPF_PROMPT: usize = 2048;
/// Longest prompt text, in bytes (before tokenizing).
pub const MAX_EBPF_PROMPT_TEXT: usize = 16 * 1024;

/// The model of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum EbpfModel {
    /// The tiny Qwen3 with deterministic random weights (needs no download).
    TinyRandom { seed: u64 },
    /// A model under the bridge's models directory: a GGUF file (llama, qwen2, qwen3) or a
    /// Hugging Face directory (Qwen3, Qwen2, Llama).
    #[serde(alias = "dir")]
    Path { path: String },
}

/// What to run on: token ids, or text the bridge tokenizes with the model's tokenizer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EbpfPrompt {
    Ids {
        ids: alloc::vec::Vec<u32>,
    },
    /// With `chat`, wrapped in the model's ChatML markup (its default system turn, the user's).
    Text {
        text: String,
        chat: bool,
    },
}

/// One BPF call, as the trace shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSpan {
    pub program: String,
    /// What the call computed ("q|k|v + input norm", "attention", …).
    pub op: String,
    /// The layer, or none for the final projection.
    pub layer: Option<u32>,
    /// Output rows (matrix products) or vector length.
    pub rows: u32,
    /// Time the kernel measured inside the program(s) (BPF_PROG_TEST_RUN's duration, summed
    /// over the threads of the call).
    pub kernel_ns: u64,
    /// Wall time of the call relative to the start of this token.
    pub start_ns: u64,
    pub end_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifierStat {
    pub program: String,
    /// Instructions the verifier processed to accept the program.
    pub instructions: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogit {
    pub token: u32,
    /// The logit (Q16 turned into f32).
    pub logit: f32,
}
