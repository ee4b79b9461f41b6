//! The eBPF tab's model: the prompt the user types, and the trace of a run summarised per
//! operator and laid out for the timeline.

use super::timeline::Span;
use kernels_wasm::protocol::ebpf::TraceSpan;
use kernels_wasm::protocol::{FileRoot, ModelEntry};

/// The model choice that needs no file: the tiny Qwen3 with random weights.
pub const TINY_RANDOM: &str = "tiny random Qwen3";

/// The architecture the tab's heading names: from what the bridge reported loading (`loaded`:
/// "GGUF llama: 30 layers, …", "HF Qwen3ForCausalLM: …", "tiny random Qwen3 (seed 1): …") once a
/// run has started, else a guess from the chosen name.
pub fn architecture(choice: &str, loaded: &str) -> String {
    let known = |name: &str| {
        let name = name.to_ascii_lowercase();
        [("qwen3", "Qwen3"), ("qwen2", "Qwen2"), ("smollm", "llama"), ("llama", "llama")]
            .into_iter()
            .find(|(key, _)| name.contains(key))
            .map(|(_, arch)| arch)
    };
    let reported = loaded.split(':').next().unwrap_or("");
    let named = reported.strip_prefix("GGUF ").or_else(|| reported.strip_prefix("HF ")).map(str::trim);
    match (known(reported), known(choice), named) {
        (Some(arch), _, _) | (None, Some(arch), _) => arch.to_string(),
        (None, None, Some(named)) if !named.is_empty() => named.to_string(),
        _ => "transformer".to_string(),
    }
}

/// The models of the bridge's models directory the engine can run (GGUF files, and directories
/// holding a config.json), SmolLM2 first, then the tiny random model.
pub fn model_choices(entries: &[ModelEntry]) -> Vec<String> {
    let mut found: Vec<String> = entries
        .iter()
        .filter(|e| e.root == FileRoot::Models)
        .filter_map(|e| {
            if e.path.ends_with(".gguf") {
                Some(e.path.clone())
            } else {
                e.path.strip_suffix("/config.json").or((e.path == "config.json").then_some(".")).map(String::from)
            }
        })
        .collect();
    found.sort_by_key(|p| (!p.to_lowercase().contains("smollm2"), p.clone()));
    found.push(TINY_RANDOM.into());
    found
}

/// A token as the page shows it: its text with whitespace made visible, or its id.
pub fn token_label(text: &str, id: u32) -> String {
    if text.is_empty() {
        return id.to_string();
    }
    text.replace(' ', "\u{2423}").replace('\n', "\u{21b5}").replace('\t', "\u{21e5}")
}

/// Token ids from "7, 300 12": commas or spaces between them.
pub fn parse_ids(text: &str) -> Result<Vec<u32>, String> {
    let ids: Vec<u32> = text
        .split([',', ' ', '\n', '\t'])
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().map_err(|_| format!("{s:?} is not a token id (a non-negative integer)")))
        .collect::<Result<_, _>>()?;
    if ids.is_empty() {
        return Err("give at least one token id".into());
    }
    Ok(ids)
}

/// Calls, kernel time and wall time of one operator over a run.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTotal {
    pub op: String,
    pub calls: usize,
    pub kernel_ns: u64,
    pub wall_ns: u64,
}

/// Per-operator totals over every position's trace, largest wall time first.
pub fn op_totals<'a>(traces: impl IntoIterator<Item = &'a [TraceSpan]>) -> Vec<OpTotal> {
    let mut totals: Vec<OpTotal> = Vec::new();
    for span in traces.into_iter().flatten() {
        let wall = span.end_ns.saturating_sub(span.start_ns);
        match totals.iter_mut().find(|t| t.op == span.op) {
            Some(t) => {
                t.calls += 1;
                t.kernel_ns += span.kernel_ns;
                t.wall_ns += wall;
            }
            None => totals.push(OpTotal { op: span.op.clone(), calls: 1, kernel_ns: span.kernel_ns, wall_ns: wall }),
        }
    }
    totals.sort_by(|a, b| b.wall_ns.cmp(&a.wall_ns).then(a.op.cmp(&b.op)));
    totals
}

/// Timeline spans of one position: "L3 attention", "vocab + …".
pub fn timeline_spans(spans: &[TraceSpan]) -> Vec<Span> {
    spans
        .iter()
        .map(|s| Span {
            name: match s.layer {
                Some(l) => format!("L{l} {}", s.op),
                None => s.op.clone(),
            },
            start_ns: s.start_ns,
            end_ns: s.end_ns.max(s.start_ns + 1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn span(op: &str, layer: Option<u32>, start: u64, end: u64, kernel: u64) -> TraceSpan {
        TraceSpan {
            program: "p".into(),
            op: op.into(),
            layer,
            rows: 1,
            kernel_ns: kernel,
            start_ns: start,
            end_ns: end,
        }
    }

    #[test]
    fn runnable_models_are_offered_smollm2_first() {
        let e = |root, path: &str| ModelEntry { root, path: path.into(), bytes: 1 };
        let entries = [
            e(FileRoot::Models, "a.gguf"),
            e(FileRoot::Models, "qwen3/config.json"),
            e(FileRoot::Models, "qwen3/model.safetensors"),
            e(FileRoot::Models, "SmolLM2-135M-Instruct.Q4_1.gguf"),
            e(FileRoot::Models, "notes.txt"),
            e(FileRoot::Assets, "kernels/x.gguf"),
        ];
        assert_eq!(model_choices(&entries), ["SmolLM2-135M-Instruct.Q4_1.gguf", "a.gguf", "qwen3", TINY_RANDOM]);
        assert_eq!(model_choices(&[]), [TINY_RANDOM]);
        // The heading names SmolLM2 what it is, and what was loaded wins over the file's name.
        assert_eq!(architecture("SmolLM2-135M-Instruct.Q4_1.gguf", ""), "llama");
        assert_eq!(architecture(TINY_RANDOM, ""), "Qwen3");
        assert_eq!(architecture("mystery.gguf", ""), "transformer");
        assert_eq!(architecture("qwen3-named.gguf", "GGUF llama: 30 layers, hidden 576, vocab 49152"), "llama");
        assert_eq!(architecture("mystery.gguf", "GGUF gemma: 26 layers"), "gemma");
        assert_eq!(architecture("llama-named", "HF Qwen3ForCausalLM: 28 layers"), "Qwen3");
        assert_eq!(architecture(TINY_RANDOM, "tiny random Qwen3 (seed 1): 2 layers, hidden 256"), "Qwen3");
        assert_eq!(token_label(" Paris\n", 7), "\u{2423}Paris\u{21b5}");
        assert_eq!(token_label("", 7), "7");
    }

    #[test]
    fn ids_parse_and_bad_ones_are_named() {
        assert_eq!(parse_ids("7, 300 12\n"), Ok(vec![7, 300, 12]));
        assert!(parse_ids("7, x").unwrap_err().contains("\"x\""));
        assert!(parse_ids("-1").is_err());
        assert!(parse_ids(" , ").is_err());
    }

    #[test]
    fn totals_sum_each_operator_over_positions() {
        let a = vec![span("attention", Some(0), 0, 10, 4), span("o", Some(0), 10, 40, 20)];
        let b = vec![span("attention", Some(0), 0, 30, 9)];
        let t = op_totals([a.as_slice(), b.as_slice()]);
        assert_eq!(t[0], OpTotal { op: "attention".into(), calls: 2, kernel_ns: 13, wall_ns: 40 });
        assert_eq!(t[1], OpTotal { op: "o".into(), calls: 1, kernel_ns: 20, wall_ns: 30 });
        let spans = timeline_spans(&a);
        assert_eq!((spans[0].name.as_str(), spans[1].start_ns), ("L0 attention", 10));
        assert_eq!(timeline_spans(&[span("vocab", None, 5, 5, 0)])[0].end_ns, 6);
    }
}
