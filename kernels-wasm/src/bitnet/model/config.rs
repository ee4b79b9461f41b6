//! A BitNet model's shape, as the GGUF metadata `bitnet.*` states it.

use super::ModelError;
use crate::gguf::{Gguf, Value};
use alloc::string::{String, ToString};
use alloc::vec::Vec;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub vocab: usize,
    /// `embedding_length`.
    pub dim: usize,
    /// `feed_forward_length`.
    pub ffn: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub rope_base: f32,
    pub eps: f32,
    /// `context_length`: the longest sequence the model was made for.
    pub context: usize,
}

/// bitnet.cpp's `generate-dummy-bitnet-model.py` layouts: (name, hidden, FFN, layers, heads).
/// Vocabulary 32002 and KV heads = heads for all of them.
pub const DUMMY_LAYOUTS: [(&str, usize, usize, usize, usize); 8] = [
    ("125M", 768, 3072, 11, 12),
    ("350M", 1024, 3072, 24, 16),
    ("1B", 2048, 3584, 24, 32),
    ("1.5B", 1536, 9216, 28, 32),
    ("2.7B", 3072, 7680, 24, 32),
    ("3.8B", 3840, 8192, 24, 32),
    ("7B", 4096, 12032, 32, 32),
    ("13B", 5120, 13824, 40, 40),
];

pub const DUMMY_VOCAB: usize = 32002;

impl Config {
    /// One of [`DUMMY_LAYOUTS`] by name (case-insensitive), or `tiny` (not bitnet.cpp's: 2
    /// layers of 256 with 2 KV heads for 4 and a 1,000-token vocabulary, for tests).
    pub fn dummy(size: &str) -> Option<Config> {
        if size.eq_ignore_ascii_case("tiny") {
            return Some(Config {
                vocab: 1000,
                dim: 256,
                ffn: 512,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                rope_base: 10000.0,
                eps: 1e-5,
                context: 2048,
            });
        }
        DUMMY_LAYOUTS.iter().find(|l| l.0.eq_ignore_ascii_case(size)).map(|&(_, dim, ffn, layers, heads)| Config {
            vocab: DUMMY_VOCAB,
            dim,
            ffn,
            layers,
            heads,
            kv_heads: heads,
            rope_base: 10000.0,
            eps: 1e-5,
            context: 2048,
        })
    }

    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim()
    }

    /// Ternary weights in all linear layers.
    pub fn ternary_weights(&self) -> u64 {
        let per_layer = 2 * self.dim * self.dim + 2 * self.dim * self.kv_dim() + 3 * self.dim * self.ffn;
        (self.layers * per_layer) as u64
    }

    /// Reads and checks the `bitnet.*` keys; the architecture must be `bitnet`.
    pub fn from_gguf(g: &Gguf) -> Result<Config, ModelError> {
        let bad = |key: &str, why: String| ModelError::Metadata { key: key.into(), why };
        let arch = g.get("general.architecture").and_then(Value::as_str).unwrap_or("(none)");
        if arch != "bitnet" {
            return Err(bad(
                "general.architecture",
                alloc::format!("{arch:?}: this runtime reads bitnet.cpp's \"bitnet\" models only"),
            ));
        }
        let int = |key: &str| -> Result<usize, ModelError> {
            let full = alloc::format!("bitnet.{key}");
            let v = g.get(&full).ok_or_else(|| bad(&full, "missing".into()))?;
            v.as_u64()
                .filter(|&n| n > 0 && n < 1 << 24)
                .map(|n| n as usize)
                .ok_or_else(|| bad(&full, alloc::format!("{v:?} is not a positive size")))
        };
        let float = |key: &str, default: f32| -> Result<f32, ModelError> {
            let full = alloc::format!("bitnet.{key}");
            match g.get(&full) {
                None => Ok(default),
                Some(v) => v
                    .as_f64()
                    .map(|f| f as f32)
                    .filter(|f| f.is_finite() && *f > 0.0)
                    .ok_or_else(|| bad(&full, alloc::format!("{v:?} is not a positive number"))),
            }
        };
        let (dim, heads) = (int("embedding_length")?, int("attention.head_count")?);
        let kv_heads = match g.get("bitnet.attention.head_count_kv") {
            None => heads,
            Some(_) => int("attention.head_count_kv")?,
        };
        let vocab = match g.get("bitnet.vocab_size") {
            Some(_) => int("vocab_size")?,
            None => g
                .get("tokenizer.ggml.tokens")
                .and_then(Value::as_array)
                .map(|a| a.len())
                .ok_or_else(|| bad("bitnet.vocab_size", "missing, and no tokenizer.ggml.tokens either".into()))?,
        };
        let c = Config {
            vocab,
            dim,
            ffn: int("feed_forward_length")?,
            layers: int("block_count")?,
            heads,
            kv_heads,
            rope_base: float("rope.freq_base", 10000.0)?,
            eps: float("attention.layer_norm_rms_epsilon", 1e-5)?,
            context: int("context_length")?,
        };
        if !dim.is_multiple_of(heads) || !heads.is_multiple_of(kv_heads) || !c.head_dim().is_multiple_of(2) {
            return Err(bad(
                "bitnet.attention.head_count",
                alloc::format!(
                    "{heads} heads and {kv_heads} KV heads do not split {dim} into even head sizes \
                     shared by whole groups"
                ),
            ));
        }
        Ok(c)
    }

    /// The metadata [`Config::from_gguf`] reads back, in the order bitnet.cpp writes it.
    pub fn metadata(&self, name: &str, file_type: u32) -> Vec<(String, Value)> {
        let u = |n: usize| Value::U32(n as u32);
        [
            ("general.architecture", Value::String("bitnet".into())),
            ("general.name", Value::String(name.into())),
            ("bitnet.block_count", u(self.layers)),
            ("bitnet.context_length", u(self.context)),
            ("bitnet.embedding_length", u(self.dim)),
            ("bitnet.feed_forward_length", u(self.ffn)),
            ("bitnet.attention.head_count", u(self.heads)),
            ("bitnet.attention.head_count_kv", u(self.kv_heads)),
            ("bitnet.rope.freq_base", Value::F32(self.rope_base)),
            ("bitnet.attention.layer_norm_rms_epsilon", Value::F32(self.eps)),
            ("general.file_type", Value::U32(file_type)),
            ("bitnet.vocab_size", u(self.vocab)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}
