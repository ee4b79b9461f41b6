//! One entry point for every model the eBPF engine runs: a Hugging Face directory (Qwen3, Qwen2,
//! Llama; tokenizer.json beside it) or a GGUF file (llama, qwen2, qwen3; tokenizer inside).

use super::gguf_model::{self, GgufFile};
use super::hf::{self, ModelError};
use super::tokenize::TextTokenizer;
use kernels_wasm::qwen3::model::{Config, FloatModel};
use std::path::Path;

pub struct Loaded {
    pub config: Config,
    pub float: FloatModel,
    /// `None` for a directory without tokenizer.json.
    pub tokenizer: Option<TextTokenizer>,
    /// What was read, for messages: "GGUF llama", "HF Qwen3ForCausalLM", …
    pub format: String,
}

/// A GGUF file is recognised by its magic, whatever its name.
fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    path.is_file() && std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"GGUF"
}

/// Loads `path` as f32 tensors with its tokenizer; `tokenizer` overrides a directory's own.
pub fn load(path: &Path, tokenizer: Option<&Path>) -> Result<Loaded, ModelError> {
    let load_tokenizer = |p: &Path| TextTokenizer::from_file(p).map_err(|e| ModelError::Tokenizer(e.to_string()));
    if is_gguf(path) {
        let file = GgufFile::read(path)?;
        let (config, float) = gguf_model::load_float(&file, path)?;
        let tokenizer = match tokenizer {
            Some(t) => Some(load_tokenizer(t)?),
            None => Some(TextTokenizer::from_gguf(&file.gguf, path).map_err(|e| ModelError::Tokenizer(e.to_string()))?),
        };
        return Ok(Loaded { config, float, tokenizer, format: format!("GGUF {}", file.architecture()) });
    }
    if !path.is_dir() {
        return Err(ModelError::Unsupported {
            path: path.into(),
            why: if path.exists() {
                "neither a GGUF file nor a model directory (config.json + *.safetensors)".into()
            } else {
                "no such file or directory".into()
            },
        });
    }
    let (config, float) = hf::load_float(path)?;
    let default = path.join("tokenizer.json");
    let tokenizer = match tokenizer {
        Some(t) => Some(load_tokenizer(t)?),
        None if default.exists() => Some(load_tokenizer(&default)?),
        None => None,
    };
    let arch = hf::architecture(path).unwrap_or_default();
    Ok(Loaded { config, float, tokenizer, format: format!("HF {arch}") })
}
