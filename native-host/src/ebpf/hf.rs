//! Hugging Face model directories of the Qwen3 family (Qwen3, and its relatives Qwen2 and Llama):
//! `config.json` plus `*.safetensors` (BF16, F16 or F32), read into the f32 tensors
//! `kernels_wasm::qwen3::model` converts; and the deterministic generator of such directories
//! with random weights (BF16, as the official checkpoints).

use kernels_wasm::gguf::f16_to_f32;
use kernels_wasm::qwen3::model::{Config, FloatLayer, FloatModel, LayerTensor, Model};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a valid config.json: {why}")]
    Config { path: PathBuf, why: String },
    #[error("{path}: unsupported model: {why}")]
    Unsupported { path: PathBuf, why: String },
    #[error("{path}: not a valid safetensors file (corrupt or truncated): {source}")]
    Safetensors { path: PathBuf, source: safetensors::SafeTensorError },
    #[error("tensor {name}: {why}")]
    Tensor { name: String, why: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("{path}: not a valid GGUF file: {source}")]
    Gguf { path: PathBuf, source: kernels_wasm::gguf::GgufError },
    #[error(transparent)]
    Range(#[from] kernels_wasm::qwen3::model::BadTensor),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError + '_ {
    move |source| ModelError::Io { path: path.to_path_buf(), source }
}

/// The HF architectures the kernels run, and what each adds to the common decoder.
const ARCHITECTURES: [(&str, &str, bool, bool); 3] = [
    // (architectures[0], model_type, QK-norm, q/k/v biases)
    ("Qwen3ForCausalLM", "qwen3", true, false),
    ("Qwen2ForCausalLM", "qwen2", false, true),
    ("LlamaForCausalLM", "llama", false, false),
];

/// `architectures[0]` of the directory's config.json.
pub fn architecture(dir: &Path) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).ok()?).ok()?;
    json["architectures"][0].as_str().map(String::from)
}

/// Reads `config.json` and checks that this is a model the kernels can run.
pub fn read_config(dir: &Path) -> Result<Config, ModelError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ModelError::Config { path: path.clone(), why: e.to_string() })?;
    let arch = json["architectures"][0].as_str().unwrap_or("");
    let Some(&(_, _, qk_norm, qkv_bias)) = ARCHITECTURES.iter().find(|a| a.0 == arch) else {
        let known: Vec<&str> = ARCHITECTURES.iter().map(|a| a.0).collect();
        return Err(ModelError::Unsupported { path, why: format!("architecture {arch:?}; supported: {known:?}") });
    };
    let int = |key: &str| {
        json[key].as_u64().map(|v| v as usize).ok_or_else(|| ModelError::Config {
            path: path.clone(),
            why: format!("{key} missing or not a positive integer"),
        })
    };
    let (hidden, heads) = (int("hidden_size")?, int("num_attention_heads")?);
    let config = Config {
        hidden,
        intermediate: int("intermediate_size")?,
        layers: int("num_hidden_layers")?,
        heads,
        kv_heads: json["num_key_value_heads"].as_u64().map(|v| v as usize).unwrap_or(heads),
        head_dim: json["head_dim"].as_u64().map(|v| v as usize).unwrap_or(hidden / heads.max(1)),
        vocab: int("vocab_size")?,
        rope_theta: json["rope_theta"].as_f64().unwrap_or(1e4),
        rms_eps: json["rms_norm_eps"].as_f64().unwrap_or(1e-6),
        qk_norm,
        qkv_bias,
    };
    if let Err(why) = config.check() {
        return Err(ModelError::Unsupported { path, why });
    }
    Ok(config)
}

/// Every `*.safetensors` file of the directory, read whole.
pub(crate) fn read_shards(dir: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, ModelError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(ModelError::Unsupported { path: dir.to_path_buf(), why: "no .safetensors file".into() });
    }
    paths.into_iter().map(|p| std::fs::read(&p).map_err(io(&p)).map(|bytes| (p, bytes))).collect()
}

pub(crate) fn to_f32(name: &str, t: &TensorView<'_>, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
    if t.shape() != shape {
        return Err(ModelError::Tensor {
            name: name.into(),
            why: format!("shape {:?}, expected {shape:?}", t.shape()),
        });
    }
    let data = t.data();
    Ok(match t.dtype() {
        Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::BF16 => {
            data.chunks_exact(2).map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)).collect()
        }
        Dtype::F16 => data.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect(),
        other => {
            return Err(ModelError::Tensor {
                name: name.into(),
                why: format!("dtype {other:?}; BF16, F16 or F32 only"),
            })
        }
    })
}

/// A layer tensor's name in a Hugging Face checkpoint.
fn hf_name(layer: usize, t: LayerTensor) -> String {
    let (name, _, bias) = t.names();
    format!("model.layers.{layer}.{name}.{}", if bias { "bias" } else { "weight" })
}

/// Loads a model directory into the golden model's fixed point.
pub fn load(dir: &Path) -> Result<Model, ModelError> {
    let (config, float) = load_float(dir)?;
    Ok(Model::from_float(config, &float)?)
}

/// Loads a model directory as f32 tensors (what the f32 reference runs on). The LM head is
/// `lm_head.weight` when the checkpoint has one, else the embeddings (tied).
pub fn load_float(dir: &Path) -> Result<(Config, FloatModel), ModelError> {
    let config = read_config(dir)?;
    let shards = read_shards(dir)?;
    let mut views: HashMap<String, TensorView<'_>> = HashMap::new();
    for (path, bytes) in &shards {
        let st =
            SafeTensors::deserialize(bytes).map_err(|source| ModelError::Safetensors { path: path.clone(), source })?;
        views.extend(st.tensors());
    }
    let c = config;
    let get = |name: String, shape: &[usize]| -> Result<Vec<f32>, ModelError> {
        let t = views.get(&name).ok_or_else(|| ModelError::Tensor { name: name.clone(), why: "missing".into() })?;
        to_f32(&name, t, shape)
    };
    let optional = |want: bool, name: String, shape: &[usize]| if want { get(name, shape) } else { Ok(Vec::new()) };
    let layers = (0..c.layers)
        .map(|i| FloatLayer::read(&c, |t, shape| get(hf_name(i, t), shape)))
        .collect::<Result<Vec<_>, ModelError>>()?;
    let float = FloatModel {
        embed: get("model.embed_tokens.weight".into(), &[c.vocab, c.hidden])?,
        layers,
        final_norm: get("model.norm.weight".into(), &[c.hidden])?,
        lm_head: optional(views.contains_key("lm_head.weight"), "lm_head.weight".into(), &[c.vocab, c.hidden])
            .map(|v| Some(v).filter(|v| !v.is_empty()))?,
    };
    Ok((config, float))
}

/// f32 → BF16 bits, round to nearest even (NaN stays NaN).
fn bf16(v: f32) -> [u8; 2] {
    let b = v.to_bits();
    let rounded = if v.is_nan() { b | 0x0040_0000 } else { b + 0x7fff + ((b >> 16) & 1) };
    ((rounded >> 16) as u16).to_le_bytes()
}

/// Writes a model directory (config.json + model.safetensors in BF16) with the deterministic
/// random weights of [`Model::random_float`]: a Qwen3 for Qwen3 configs, a Qwen2 when the config
/// has q/k/v biases, a Llama when it has neither them nor QK-norm.
pub fn write_random(dir: &Path, c: Config, seed: u64) -> Result<(), ModelError> {
    write_float(
        dir,
        c,
        &Model::random_float(c, seed),
        &format!("substrates random weights, seed {seed}: not a trained model"),
    )
}

/// Writes `f` as a model directory of `c`'s architecture (BF16).
pub fn write_float(dir: &Path, c: Config, f: &FloatModel, note: &str) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let (arch, model_type, ..) =
        ARCHITECTURES.iter().find(|a| a.2 == c.qk_norm && a.3 == c.qkv_bias).ok_or_else(|| {
            ModelError::Unsupported { path: dir.into(), why: "QK-norm together with q/k/v biases".into() }
        })?;
    let config = serde_json::json!({
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": c.hidden,
        "intermediate_size": c.intermediate,
        "num_hidden_layers": c.layers,
        "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "vocab_size": c.vocab,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_eps,
        "tie_word_embeddings": f.lm_head.is_none(),
        "max_position_embeddings": 4096,
        "hidden_act": "silu",
        "attention_bias": c.qkv_bias,
        "use_sliding_window": false,
        "sliding_window": null,
        "max_window_layers": c.layers,
        "torch_dtype": "bfloat16",
        "note": note,
    });
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap_or_default()).map_err(io(&path))?;
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut put = |name: String, shape: Vec<usize>, v: &[f32]| {
        tensors.push((name, shape, v.iter().flat_map(|&x| bf16(x)).collect()))
    };
    put("model.embed_tokens.weight".into(), vec![c.vocab, c.hidden], &f.embed);
    put("model.norm.weight".into(), vec![c.hidden], &f.final_norm);
    if let Some(head) = &f.lm_head {
        put("lm_head.weight".into(), vec![c.vocab, c.hidden], head);
    }
    for (i, l) in f.layers.iter().enumerate() {
        for (t, shape, values) in l.tensors(&c) {
            put(hf_name(i, t), shape, values);
        }
    }
    let views = tensors
        .iter()
        .map(|(n, s, d)| {
            TensorView::new(Dtype::BF16, s.clone(), d)
                .map(|v| (n.clone(), v))
                .map_err(|e| ModelError::Tensor { name: n.clone(), why: e.to_string() })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let path = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &path)
        .map_err(|source| ModelError::Safetensors { path: path.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16(1.0), [0x80, 0x3f]);
        // Ties to even: 1 + 2^-8 is halfway between two BF16 values; it rounds to 1.0.
        assert_eq!(bf16(1.0 + 2f32.powi(-8)), [0x80, 0x3f]);
    }
}
