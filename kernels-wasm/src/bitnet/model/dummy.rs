//! Dummy models, as bitnet.cpp's `generate-dummy-bitnet-model.py` makes them for benchmarks:
//! a layout's shapes with random weights. Ours are deterministic from a seed (each tensor from
//! the seed and its name, so any tensor can be made on its own), and carry a synthetic
//! SentencePiece vocabulary so they tokenise and print text.

use super::config::Config;
use super::linear::Quant;
use super::write::{Kind, Values};
use crate::bitnet::random::Rng;
use crate::gguf::Value;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// The metadata of a dummy model: the shape and a vocabulary of `c.vocab` tokens (`<unk>`,
/// `<s>`, `</s>`, the 256 byte tokens, printable ASCII, then letter strings with and without
/// the `▁` word mark, shorter ones scoring higher).
pub fn metadata(c: &Config, name: &str, quant: Quant) -> Vec<(String, Value)> {
    let mut m = c.metadata(name, quant.file_type());
    let (tokens, types) = vocabulary(c.vocab);
    let scores: Vec<Value> = (0..tokens.len()).map(|i| Value::F32(-(i as f32))).collect();
    m.extend([
        ("tokenizer.ggml.model".to_string(), Value::String("llama".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens.into_iter().map(Value::String).collect())),
        ("tokenizer.ggml.scores".into(), Value::Array(scores)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.padding_token_id".into(), Value::U32(0)),
    ]);
    m
}

fn vocabulary(n: usize) -> (Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].iter().map(|s| s.to_string()).collect();
    let mut types = alloc::vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(alloc::format!("<0x{b:02X}>"));
        types.push(6);
    }
    tokens.push("\u{2581}".into());
    types.push(1);
    for c in 33u8..127 {
        tokens.push((c as char).to_string());
        types.push(1);
    }
    // Strings over a–z of growing length, each also as a word start.
    let mut len = 1;
    'fill: while tokens.len() < n {
        let count = 26usize.pow(len);
        for i in 0..count {
            let mut s = String::new();
            let mut v = i;
            for _ in 0..len {
                s.insert(0, (b'a' + (v % 26) as u8) as char);
                v /= 26;
            }
            for t in [alloc::format!("\u{2581}{s}"), s] {
                if tokens.len() >= n {
                    break 'fill;
                }
                if len > 1 || t.starts_with('\u{2581}') {
                    tokens.push(t);
                    types.push(1);
                }
            }
        }
        len += 1;
    }
    tokens.truncate(n);
    types.truncate(n);
    (tokens, types)
}

/// The values of tensor `name` of a dummy model with `seed`.
pub fn values(seed: u64, name: &str, kind: &Kind) -> Values {
    // FNV-1a of the name: each tensor has its own stream.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let mut rng = Rng::new(seed ^ h);
    match *kind {
        Kind::Linear { m, k, .. } => Values::Ternary(rng.ternary(m, k)),
        Kind::Table { rows, cols, .. } => Values::F32(rng.f32s(rows * cols, 1.0)),
        Kind::Norm(n) => Values::F32(rng.f32s(n, 1.0).into_iter().map(|v| 1.0 + 0.25 * v).collect()),
        Kind::Scale => Values::F32(Vec::new()),
    }
}
