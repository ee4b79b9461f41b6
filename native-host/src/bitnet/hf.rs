//! `bitnet convert` from a Hugging Face BitNet b1.58 checkpoint (`BitnetForCausalLM`, as
//! 1bitLLM's models and bitnet.cpp's `convert-hf-to-gguf-bitnet.py` know it): `config.json`,
//! `*.safetensors` (F32, F16 or BF16 latent weights, absmean-quantised on the way) and the
//! SentencePiece `tokenizer.model`.
//!
//! Names: `model.embed_tokens` → `token_embd`, per layer `input_layernorm` → `attn_norm`,
//! `self_attn.{q,k,v,o}_proj` → `attn_{q,k,v,output}`, `self_attn.inner_attn_ln` →
//! `attn_sub_norm`, `post_attention_layernorm` → `ffn_norm`, `mlp.{gate,up,down}_proj` →
//! `ffn_{gate,up,down}`, `mlp.ffn_layernorm` → `ffn_sub_norm`; `model.norm` → `output_norm`,
//! `lm_head` → `output` (absent when tied). q and k are not permuted: the runtime's RoPE pairs
//! `x[i]` with `x[i + d/2]`, as Hugging Face's `rotate_half` does.

use crate::ebpf::hf::{read_shards, to_f32};
use anyhow::{bail, Context, Result};
use kernels_wasm::bitnet::model::config::Config;
use kernels_wasm::gguf::Value;
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;

/// The GGUF name of a checkpoint tensor, or `None` for one the model does not use.
pub fn gguf_name(hf: &str) -> Option<String> {
    let simple = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = simple.iter().find(|(h, _)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (i, what) = rest.split_once('.')?;
    let i: usize = i.parse().ok()?;
    let g = match what {
        "input_layernorm.weight" => "attn_norm",
        "self_attn.q_proj.weight" => "attn_q",
        "self_attn.k_proj.weight" => "attn_k",
        "self_attn.v_proj.weight" => "attn_v",
        "self_attn.o_proj.weight" => "attn_output",
        "self_attn.inner_attn_ln.weight" => "attn_sub_norm",
        "post_attention_layernorm.weight" => "ffn_norm",
        "mlp.gate_proj.weight" => "ffn_gate",
        "mlp.up_proj.weight" => "ffn_up",
        "mlp.down_proj.weight" => "ffn_down",
        "mlp.ffn_layernorm.weight" => "ffn_sub_norm",
        _ => return None,
    };
    Some(format!("blk.{i}.{g}.weight"))
}

/// A checkpoint directory: its shape, its tensors by GGUF name (f32), and its tokenizer's
/// GGUF metadata.
pub struct Checkpoint {
    pub config: Config,
    pub tensors: HashMap<String, Vec<f32>>,
    pub tokenizer: Vec<(String, Value)>,
    pub tied: bool,
}

pub fn read(dir: &Path) -> Result<Checkpoint> {
    let text =
        std::fs::read_to_string(dir.join("config.json")).with_context(|| format!("{}/config.json", dir.display()))?;
    let j: serde_json::Value = serde_json::from_str(&text).context("config.json is not JSON")?;
    let int = |k: &str| -> Result<usize> {
        j.get(k)
            .and_then(|v| v.as_u64())
            .filter(|&n| n > 0 && n < 1 << 24)
            .map(|n| n as usize)
            .with_context(|| format!("config.json: {k} missing or not a positive size"))
    };
    let heads = int("num_attention_heads")?;
    let config = Config {
        vocab: int("vocab_size")?,
        dim: int("hidden_size")?,
        ffn: int("intermediate_size")?,
        layers: int("num_hidden_layers")?,
        heads,
        kv_heads: int("num_key_value_heads").unwrap_or(heads),
        rope_base: j.get("rope_theta").and_then(|v| v.as_f64()).unwrap_or(10000.0) as f32,
        eps: j.get("rms_norm_eps").and_then(|v| v.as_f64()).unwrap_or(1e-6) as f32,
        context: int("max_position_embeddings").unwrap_or(2048),
    };
    let shards = read_shards(dir)?;
    let mut tensors = HashMap::new();
    for (path, bytes) in &shards {
        let st = SafeTensors::deserialize(bytes)
            .with_context(|| format!("{}: not a valid safetensors file", path.display()))?;
        for (name, view) in st.tensors() {
            if let Some(g) = gguf_name(&name) {
                let shape = view.shape().to_vec();
                tensors.insert(g, to_f32(&name, &view, &shape)?);
            }
        }
    }
    let tied = !tensors.contains_key("output.weight");
    let bos = j.get("bos_token_id").and_then(|v| v.as_u64()).unwrap_or(1) as u32;
    let eos = j.get("eos_token_id").and_then(|v| v.as_u64()).unwrap_or(2) as u32;
    let model = dir.join("tokenizer.model");
    let proto = std::fs::read(&model).with_context(|| format!("{}: the SentencePiece tokenizer", model.display()))?;
    let pieces = sentencepiece(&proto).with_context(|| format!("{}", model.display()))?;
    if pieces.len() != config.vocab {
        bail!("{}: {} pieces for a vocabulary of {}", model.display(), pieces.len(), config.vocab);
    }
    let tokenizer = vec![
        ("tokenizer.ggml.model".to_string(), Value::String("llama".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(pieces.iter().map(|p| Value::String(p.0.clone())).collect())),
        ("tokenizer.ggml.scores".into(), Value::Array(pieces.iter().map(|p| Value::F32(p.1)).collect())),
        ("tokenizer.ggml.token_type".into(), Value::Array(pieces.iter().map(|p| Value::I32(p.2)).collect())),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(bos)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(eos)),
    ];
    Ok(Checkpoint { config, tensors, tokenizer, tied })
}

/// The pieces of a SentencePiece `ModelProto`: (piece, score, type). Only field 1 (repeated
/// `SentencePiece { piece = 1; score = 2; type = 3 }`) is read; the rest is skipped.
pub fn sentencepiece(b: &[u8]) -> Result<Vec<(String, f32, i32)>> {
    let mut out = Vec::new();
    let mut r = Proto { b, at: 0 };
    while let Some((field, wire)) = r.key()? {
        if field == 1 && wire == 2 {
            let body = r.bytes()?;
            let mut p = Proto { b: body, at: 0 };
            let (mut piece, mut score, mut ty) = (String::new(), 0.0f32, 1i32);
            while let Some((f, w)) = p.key()? {
                match (f, w) {
                    (1, 2) => piece = String::from_utf8(p.bytes()?.to_vec()).context("a piece is not UTF-8")?,
                    (2, 5) => score = f32::from_le_bytes(p.fixed::<4>()?),
                    (3, 0) => ty = p.varint()? as i32,
                    _ => p.skip(w)?,
                }
            }
            out.push((piece, score, ty));
        } else {
            r.skip(wire)?;
        }
    }
    if out.is_empty() {
        bail!("no pieces: not a SentencePiece model");
    }
    Ok(out)
}

struct Proto<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Proto<'a> {
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.at).context("truncated varint")?;
            self.at += 1;
            v |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        bail!("varint longer than 64 bits")
    }

    fn key(&mut self) -> Result<Option<(u64, u64)>> {
        if self.at >= self.b.len() {
            return Ok(None);
        }
        let k = self.varint()?;
        Ok(Some((k >> 3, k & 7)))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.varint()? as usize;
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).context("truncated field")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.b.get(self.at..self.at + N).context("truncated field")?;
        self.at += N;
        Ok(s.try_into()?)
    }

    fn skip(&mut self, wire: u64) -> Result<()> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.fixed::<8>().map(drop),
            2 => self.bytes().map(drop),
            5 => self.fixed::<4>().map(drop),
            w => bail!("protobuf wire type {w} is not supported"),
        }
    }
}
