//! GGUF checkpoints of the llama, qwen2 and qwen3 architectures, dequantised on load into the
//! f32 tensors `kernels_wasm::qwen3::model` converts; and the writer of such files (F32) for
//! tests and generated models.
//!
//! llama.cpp's converter permutes the rows of llama's q and k projections so that ggml's
//! default RoPE, which rotates adjacent pairs (2i, 2i+1), equals HF's rotate-half RoPE on pairs
//! (i, i + d/2). Our kernels rotate halves, so loading undoes the permutation: GGUF row
//! `h·d + 2i + s` is HF row `h·d + s·d/2 + i`. qwen2 and qwen3 use ggml's NEOX RoPE
//! (rotate-half) and are stored unpermuted.

use super::hf::ModelError;
use kernels_wasm::gguf::{Gguf, GgufWriter, Value};
use kernels_wasm::qwen3::model::{Config, FloatLayer, FloatModel, LayerTensor};
use std::path::Path;

/// (general.architecture, QK-norm, q/k/v biases, q/k rows permuted for ggml's RoPE)
const ARCHITECTURES: [(&str, bool, bool, bool); 3] =
    [("llama", false, false, true), ("qwen2", false, true, false), ("qwen3", true, false, false)];

/// A GGUF file in memory, parsed.
pub struct GgufFile {
    pub bytes: Vec<u8>,
    pub gguf: Gguf,
}

impl GgufFile {
    pub fn read(path: &Path) -> Result<GgufFile, ModelError> {
        let bytes = std::fs::read(path).map_err(|source| ModelError::Io { path: path.into(), source })?;
        let gguf = Gguf::parse(&bytes).map_err(|source| ModelError::Gguf { path: path.into(), source })?;
        Ok(GgufFile { bytes, gguf })
    }

    /// The architecture name (`general.architecture`).
    pub fn architecture(&self) -> &str {
        self.gguf.get("general.architecture").and_then(Value::as_str).unwrap_or("")
    }
}

/// Row `r` of the HF matrix is row `permuted_row(r)` of the GGUF one (see the module comment).
fn permuted_row(r: usize, head_dim: usize) -> usize {
    let (h, within) = (r / head_dim, r % head_dim);
    let (s, i) = (within / (head_dim / 2), within % (head_dim / 2));
    h * head_dim + 2 * i + s
}

/// Reorders the rows of a `rows × cols` matrix: `out[r] = w[from(r)]`.
fn reorder_rows(w: &[f32], cols: usize, from: impl Fn(usize) -> usize) -> Vec<f32> {
    (0..w.len() / cols).flat_map(|r| w[from(r) * cols..(from(r) + 1) * cols].iter().copied()).collect()
}

/// A layer tensor's name in a GGUF file.
fn gguf_name(layer: usize, t: LayerTensor) -> String {
    let (_, name, bias) = t.names();
    format!("blk.{layer}.{name}.{}", if bias { "bias" } else { "weight" })
}

/// Reads the shape from the metadata and every tensor, dequantised. `path` only names errors.
pub fn load_float(file: &GgufFile, path: &Path) -> Result<(Config, FloatModel), ModelError> {
    let g = &file.gguf;
    let arch = file.architecture();
    let Some(&(_, qk_norm, qkv_bias, permuted)) = ARCHITECTURES.iter().find(|a| a.0 == arch) else {
        let known: Vec<&str> = ARCHITECTURES.iter().map(|a| a.0).collect();
        return Err(ModelError::Unsupported {
            path: path.into(),
            why: format!("architecture {arch:?}; supported: {known:?}"),
        });
    };
    let key = |k: &str| format!("{arch}.{k}");
    let int = |k: &str| {
        g.get(&key(k)).and_then(Value::as_u64).map(|v| v as usize).ok_or_else(|| ModelError::Config {
            path: path.into(),
            why: format!("metadata {} missing or not an integer", key(k)),
        })
    };
    let float = |k: &str, default: f64| g.get(&key(k)).and_then(Value::as_f64).unwrap_or(default);
    let embed_info = g
        .tensor("token_embd.weight")
        .ok_or_else(|| ModelError::Tensor { name: "token_embd.weight".into(), why: "missing".into() })?;
    let (hidden, heads) = (int("embedding_length")?, int("attention.head_count")?);
    let config = Config {
        hidden,
        intermediate: int("feed_forward_length")?,
        layers: int("block_count")?,
        heads,
        kv_heads: int("attention.head_count_kv").unwrap_or(heads),
        head_dim: int("attention.key_length").unwrap_or(hidden / heads.max(1)),
        vocab: embed_info.dims.get(1).copied().unwrap_or(0) as usize,
        rope_theta: float("rope.freq_base", 1e4),
        rms_eps: float("attention.layer_norm_rms_epsilon", 1e-6),
        qk_norm,
        qkv_bias,
    };
    if let Err(why) = config.check() {
        return Err(ModelError::Unsupported { path: path.into(), why });
    }
    let c = config;
    // A tensor by name, checked against its (out, in) shape, as f32.
    let get = |name: String, shape: &[usize]| -> Result<Vec<f32>, ModelError> {
        let t = g.tensor(&name).ok_or_else(|| ModelError::Tensor { name: name.clone(), why: "missing".into() })?;
        let dims: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        if dims != shape {
            return Err(ModelError::Tensor { name, why: format!("shape {dims:?} (outer first), expected {shape:?}") });
        }
        g.dequantize(&file.bytes, t).map_err(|e| ModelError::Tensor { name, why: e.to_string() })
    };
    let unpermute = |w: Vec<f32>| {
        if permuted {
            reorder_rows(&w, c.hidden, |r| permuted_row(r, c.head_dim))
        } else {
            w
        }
    };
    let layers = (0..c.layers)
        .map(|i| {
            FloatLayer::read(&c, |t, shape| {
                let w = get(gguf_name(i, t), shape)?;
                Ok(if matches!(t, LayerTensor::Q | LayerTensor::K) { unpermute(w) } else { w })
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    let model = FloatModel {
        embed: get("token_embd.weight".into(), &[c.vocab, c.hidden])?,
        layers,
        final_norm: get("output_norm.weight".into(), &[c.hidden])?,
        lm_head: match g.tensor("output.weight") {
            Some(_) => Some(get("output.weight".into(), &[c.vocab, c.hidden])?),
            None => None,
        },
    };
    Ok((config, model))
}

/// A GGUF writer holding `f` as `c`'s architecture, all tensors F32 (llama's q/k permuted as
/// llama.cpp's converter does). Add tokenizer metadata before writing it out.
pub fn float_writer(c: Config, f: &FloatModel) -> Result<GgufWriter, String> {
    let (arch, .., permuted) = *ARCHITECTURES
        .iter()
        .find(|a| a.1 == c.qk_norm && a.2 == c.qkv_bias)
        .ok_or("QK-norm together with q/k/v biases is no GGUF architecture")?;
    let mut w = GgufWriter::default();
    let key = |k: &str| format!("{arch}.{k}");
    w.meta("general.architecture", Value::String(arch.into()))
        .meta("general.name", Value::String("substrates generated".into()))
        .meta(&key("block_count"), Value::U32(c.layers as u32))
        .meta(&key("context_length"), Value::U32(4096))
        .meta(&key("embedding_length"), Value::U32(c.hidden as u32))
        .meta(&key("feed_forward_length"), Value::U32(c.intermediate as u32))
        .meta(&key("attention.head_count"), Value::U32(c.heads as u32))
        .meta(&key("attention.head_count_kv"), Value::U32(c.kv_heads as u32))
        .meta(&key("attention.key_length"), Value::U32(c.head_dim as u32))
        .meta(&key("attention.value_length"), Value::U32(c.head_dim as u32))
        .meta(&key("rope.dimension_count"), Value::U32(c.head_dim as u32))
        .meta(&key("rope.freq_base"), Value::F32(c.rope_theta as f32))
        .meta(&key("attention.layer_norm_rms_epsilon"), Value::F32(c.rms_eps as f32));
    let dims = |shape: &[usize]| -> Vec<u64> { shape.iter().rev().map(|&d| d as u64).collect() };
    let mut put = |name: String, shape: &[usize], v: &[f32]| {
        w.f32_tensor(&name, &dims(shape), v);
    };
    // The inverse of loading: GGUF row permuted_row(r) holds HF row r.
    let permute = |m: &[f32]| -> Vec<f32> {
        if !permuted {
            return m.to_vec();
        }
        let mut out = vec![0.0; m.len()];
        for r in 0..m.len() / c.hidden {
            let to = permuted_row(r, c.head_dim);
            out[to * c.hidden..(to + 1) * c.hidden].copy_from_slice(&m[r * c.hidden..(r + 1) * c.hidden]);
        }
        out
    };
    put("token_embd.weight".into(), &[c.vocab, c.hidden], &f.embed);
    put("output_norm.weight".into(), &[c.hidden], &f.final_norm);
    if let Some(head) = &f.lm_head {
        put("output.weight".into(), &[c.vocab, c.hidden], head);
    }
    for (i, l) in f.layers.iter().enumerate() {
        for (t, shape, values) in l.tensors(&c) {
            let values = if matches!(t, LayerTensor::Q | LayerTensor::K) { permute(values) } else { values.to_vec() };
            put(gguf_name(i, t), &shape, &values);
        }
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_llama_permutation_matches_llama_cpp() {
        // llama.cpp: w.reshape(n_head, 2, d/2, …).swapaxes(1, 2): GGUF rows 0..6 of a head of 64
        // come from HF rows 0, 32, 1, 33, 2, 34.
        let from: Vec<usize> =
            (0..6).map(|gguf_row| (0..64).find(|&r| permuted_row(r, 64) == gguf_row).unwrap()).collect();
        assert_eq!(from, [0, 32, 1, 33, 2, 34]);
        assert_eq!(permuted_row(64 + 33, 64), 64 + 3); // second head, s = 1, i = 1
    }
}
