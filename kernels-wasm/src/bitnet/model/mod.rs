//! Whole BitNet b1.58 models as bitnet.cpp runs them: its llama.cpp fork's `bitnet`
//! architecture, read from (and written to) the same GGUF files.
//!
//! The architecture is LLaMA with two extra RMSNorms (`attn_sub_norm` before the attention
//! output projection, `ffn_sub_norm` before the FFN down projection) and a SiLU-gated FFN
//! (bitnet.cpp's own output settles which; see [`forward`]). Every linear layer but the output is ternary (I2_S, TL1 or TL2, one f32 scale per
//! tensor) and quantises its input row to int8 itself, as ggml's mul_mat does; embeddings and
//! output are F16, F32, Q8_0 or Q6_K.
//!
//! - [`config`]: the shape from the GGUF metadata, and the dummy layouts of
//!   `generate-dummy-bitnet-model.py`.
//! - [`linear`]: one ternary linear layer in any format; `block_gemm`: its AVX-512 prompt
//!   GEMM in 32-row blocks.
//! - [`table`]: the embedding table, which is also the output layer; [`qtable`]: its Q8_0 and
//!   Q6_K forms.
//! - [`par`]: how a layer's rows are shared out (one thread, or the [`super::pool::Pool`]).
//! - [`forward`]: the model, one struct per layer; [`cache`]: its KV cache (F16, as llama.cpp's).
//! - [`load`] / [`write`]: GGUF in and out (weights stay in the file's memory map).
//! - [`build`]: layers from their tensors, wherever the bytes are (a file, a node's buffers).
//! - [`tokenizer`]: the SentencePiece BPE (`tokenizer.ggml.model = llama`) of llama.cpp.
//! - [`convert`]: f32/f16 weights to ternary, as bitnet.cpp's converter does.
//! - [`sample`]: greedy and temperature sampling.
//! - [`dummy`]: deterministic random models of the dummy layouts.

mod attend;
#[cfg(all(target_arch = "x86_64", feature = "std"))]
mod block_gemm;
pub mod build;
pub mod cache;
pub mod config;
pub mod convert;
pub mod dummy;
pub mod forward;
pub mod linear;
#[cfg(target_has_atomic = "ptr")]
pub mod load;
pub mod par;
pub mod qtable;
pub mod sample;
pub mod table;
pub mod tokenizer;
pub mod write;

pub use config::Config;
pub use forward::{Cache, Exec, Logits, Model};
pub use linear::{Linear, Quant};

use super::BitnetError;
use crate::gguf::GgufError;
use alloc::string::String;

/// What was wrong with a model file or a request to run it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("metadata {key}: {why}")]
    Metadata { key: String, why: String },
    #[error("tensor {name}: {why}")]
    Tensor { name: String, why: String },
    #[error("tensor {name}: {source}")]
    Kernel { name: String, source: BitnetError },
    #[error("{0}")]
    Kernels(#[from] BitnetError),
    #[error("no tokens to run")]
    NoTokens,
    #[error("position {pos} is beyond the context of {context} tokens")]
    Context { pos: usize, context: usize },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    Token { id: usize, vocab: usize },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("the f32 reference forward rounds nothing, so it needs an f32 KV cache (Cache::f32); this one keeps F16")]
    ReferenceCache,
}

impl ModelError {
    pub(crate) fn tensor(name: &str, why: impl Into<String>) -> ModelError {
        ModelError::Tensor { name: name.into(), why: why.into() }
    }
}

#[cfg(test)]
mod tests;
