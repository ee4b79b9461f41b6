//! The SentencePiece BPE tokenizer as llama.cpp runs it (`tokenizer.ggml.model = "llama"`):
//! spaces become `▁` (with one prepended), the text starts as single characters, and the
//! adjacent pair whose concatenation is the highest-scoring vocabulary entry merges first (ties:
//! leftmost), until no pair is in the vocabulary. A character that never became a token falls
//! back to its UTF-8 bytes, the `<0xXX>` tokens.

use super::ModelError;
use crate::gguf::{Gguf, Value};
use alloc::collections::{BTreeMap, BinaryHeap};
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Ordering;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const TYPE_CONTROL: i32 = 3;
const TYPE_BYTE: i32 = 6;

const SPACE: &str = "\u{2581}";

#[derive(Debug, Clone, PartialEq)]
pub struct Tokenizer {
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<i32>,
    ids: BTreeMap<String, u32>,
    bytes: [Option<u32>; 256],
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    add_space_prefix: bool,
}

/// A candidate merge of the symbols `left` and `right`.
#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        // Max-heap: the higher score, then the leftmost.
        self.score.total_cmp(&o.score).then(o.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A run of the text: `start..start + len`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Tokenizer {
    /// The tokenizer a GGUF file carries; `None` if it carries none.
    pub fn from_gguf(g: &Gguf) -> Result<Option<Tokenizer>, ModelError> {
        let bad = |key: &str, why: String| ModelError::Metadata { key: key.into(), why };
        let Some(tokens) = g.get("tokenizer.ggml.tokens") else { return Ok(None) };
        let model = g.get("tokenizer.ggml.model").and_then(Value::as_str).unwrap_or("(none)");
        if model != "llama" {
            return Err(bad(
                "tokenizer.ggml.model",
                alloc::format!("{model:?}: BitNet models here use the SentencePiece tokenizer (\"llama\")"),
            ));
        }
        let tokens: Vec<String> = tokens
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_str().map(String::from)).collect())
            .ok_or_else(|| bad("tokenizer.ggml.tokens", "not an array of strings".into()))?;
        let n = tokens.len();
        let floats = |key: &str| -> Result<Vec<f32>, ModelError> {
            match g.get(key) {
                None => Ok(alloc::vec![0.0; n]),
                Some(v) => v
                    .as_array()
                    .and_then(|a| a.iter().map(|v| v.as_f64().map(|f| f as f32)).collect::<Option<Vec<_>>>())
                    .filter(|a| a.len() == n)
                    .ok_or_else(|| bad(key, alloc::format!("not {n} numbers"))),
            }
        };
        let scores = floats("tokenizer.ggml.scores")?;
        let types = match g.get("tokenizer.ggml.token_type") {
            None => alloc::vec![1; n],
            Some(v) => v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|v| if let Value::I32(t) = v { Some(*t) } else { v.as_u64().map(|t| t as i32) })
                        .collect()
                })
                .filter(|a: &Vec<i32>| a.len() == n)
                .ok_or_else(|| bad("tokenizer.ggml.token_type", alloc::format!("not {n} integers")))?,
        };
        let id = |key: &str| -> Result<Option<u32>, ModelError> {
            match g.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .filter(|&i| (i as usize) < n)
                    .map(|i| Some(i as u32))
                    .ok_or_else(|| bad(key, alloc::format!("{v:?} is not a token id below {n}"))),
            }
        };
        let flag = |key: &str| match g.get(key) {
            Some(Value::Bool(b)) => *b,
            _ => true,
        };
        let mut t = Tokenizer {
            ids: BTreeMap::new(),
            bytes: [None; 256],
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token"),
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix"),
            tokens,
            scores,
            types,
        };
        for (i, tok) in t.tokens.iter().enumerate() {
            t.ids.entry(tok.clone()).or_insert(i as u32);
            if t.types[i] == TYPE_BYTE {
                if let Some(b) = byte_token(tok) {
                    t.bytes[b as usize] = Some(i as u32);
                }
            }
        }
        Ok(Some(t))
    }

    pub fn vocab(&self) -> usize {
        self.tokens.len()
    }

    /// Token ids of `text`, after BOS when the model asks for it.
    pub fn encode(&self, text: &str, bos: bool) -> Result<Vec<u32>, ModelError> {
        let mut out = Vec::new();
        if bos && self.add_bos {
            out.extend(self.bos);
        }
        if text.is_empty() {
            return Ok(out);
        }
        let mut s = String::new();
        if self.add_space_prefix {
            s.push(' ');
        }
        s.push_str(text);
        let s = s.replace(' ', SPACE);
        let mut sym: Vec<Symbol> = Vec::new();
        for (i, (start, c)) in s.char_indices().enumerate() {
            sym.push(Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: Some(i + 1) });
        }
        if let Some(last) = sym.last_mut() {
            last.next = None;
        }
        let mut queue = BinaryHeap::new();
        let try_add = |queue: &mut BinaryHeap<Bigram>, sym: &[Symbol], left: Option<usize>, right: Option<usize>| {
            let (Some(l), Some(r)) = (left, right) else { return };
            let text = &s[sym[l].start..sym[r].start + sym[r].len];
            if let Some(&id) = self.ids.get(text) {
                queue.push(Bigram { score: self.scores[id as usize], left: l, right: r, size: text.len() });
            }
        };
        for i in 1..sym.len() {
            try_add(&mut queue, &sym, Some(i - 1), Some(i));
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (sym[b.left], sym[b.right]);
            // Stale: one side has merged since this pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            sym[b.left].len += r.len;
            sym[b.right].len = 0;
            sym[b.left].next = r.next;
            if let Some(n) = r.next {
                sym[n].prev = Some(b.left);
            }
            try_add(&mut queue, &sym, l.prev, Some(b.left));
            try_add(&mut queue, &sym, Some(b.left), r.next);
        }
        let mut at = Some(0);
        while let Some(i) = at {
            let text = &s[sym[i].start..sym[i].start + sym[i].len];
            match self.ids.get(text) {
                Some(&id) => out.push(id),
                None => {
                    for byte in text.bytes() {
                        let id = self.bytes[byte as usize].ok_or_else(|| {
                            ModelError::Tokenizer(alloc::format!("no token for byte {byte:#04x} (no byte fallback)"))
                        })?;
                        out.push(id);
                    }
                }
            }
            at = sym[i].next;
        }
        Ok(out)
    }

    /// The bytes token `id` prints as: `▁` as a space, a byte token as its byte, nothing for a
    /// control token.
    pub fn piece(&self, id: u32) -> Vec<u8> {
        let Some(tok) = self.tokens.get(id as usize) else { return Vec::new() };
        match self.types[id as usize] {
            TYPE_BYTE => byte_token(tok).map(|b| alloc::vec![b]).unwrap_or_default(),
            TYPE_CONTROL => Vec::new(),
            _ => tok.replace(SPACE, " ").into_bytes(),
        }
    }

    pub fn decode(&self, ids: &[u32]) -> Vec<u8> {
        ids.iter().flat_map(|&id| self.piece(id)).collect()
    }

    /// The vocabulary entry of `id` as stored.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }
}

/// `<0xAB>` → 0xAB.
fn byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok()).flatten()
}
