//! Every seed, its prefixes and byte flips through every target, without libFuzzer.

use super::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// Targets whose seeds are committed under `fuzz/corpus/<target>/` (the others' are made by
/// [`seed_corpus`]).
const COMMITTED: [&str; 5] = ["ws_message", "gguf", "hf_config", "tokenizer", "ptx"];

fn generated() -> &'static [(&'static str, Vec<u8>)] {
    static SEEDS: OnceLock<Vec<(&'static str, Vec<u8>)>> = OnceLock::new();
    SEEDS.get_or_init(seed_corpus)
}

/// The generated seeds of target `name`.
fn generated_for(name: &str) -> impl Iterator<Item = &'static Vec<u8>> + '_ {
    generated().iter().filter(move |s| s.0 == name).map(|s| &s.1)
}

/// The files of `fuzz/corpus/<name>/`, by name.
fn committed(name: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(fuzz_dir().join("corpus").join(name)) else { return Vec::new() };
    let mut files: Vec<(String, Vec<u8>)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter_map(|p| Some((p.file_name()?.to_string_lossy().into_owned(), std::fs::read(&p).ok()?)))
        // `gen-*` are seed_corpus's, written out for libFuzzer (and ignored by git).
        .filter(|(name, _)| !name.starts_with("gen-"))
        .collect();
    files.sort();
    files
}

fn seeds(name: &str) -> Vec<(String, Vec<u8>)> {
    let mut all = committed(name);
    all.extend(
        generated().iter().filter(|s| s.0 == name).enumerate().map(|(i, s)| (format!("seed_corpus #{i}"), s.1.clone())),
    );
    all
}

fn target(name: &str) -> fn(&[u8]) {
    TARGETS.iter().find(|t| t.0 == name).unwrap_or_else(|| panic!("no target {name}")).1
}

/// Mutation-lite: prefixes of a few lengths, and single bytes flipped (the first eight,
/// where magics, versions and lengths are, and eight spread over the rest), deterministic.
fn mutations(seed: &[u8]) -> Vec<(String, Vec<u8>)> {
    let n = seed.len();
    let mut cuts = vec![0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 64, n / 4, n / 2, 3 * n / 4, n.saturating_sub(1)];
    cuts.retain(|&c| c < n);
    cuts.sort_unstable();
    cuts.dedup();
    let mut out: Vec<(String, Vec<u8>)> =
        cuts.into_iter().map(|c| (format!("prefix {c}"), seed[..c].to_vec())).collect();
    if n > 0 {
        let mut at: Vec<usize> = (0..n.min(8)).collect();
        at.extend((1..=8).map(|k| k * (n - 1) / 8));
        at.sort_unstable();
        at.dedup();
        for (i, p) in at.into_iter().enumerate() {
            let x = [0x01u8, 0x80, 0xff, 0x7f][i % 4];
            let mut m = seed.to_vec();
            m[p] ^= x;
            out.push((format!("byte {p} ^ {x:#04x}"), m));
        }
    }
    out
}

/// Runs `input` through target `name`; a panic is reported with where the input came from,
/// and the input is kept in `fuzz/artifacts/<name>/` for `cargo fuzz run <name> <file>`.
fn run_one(name: &str, what: &str, input: &[u8]) {
    let f = target(name);
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(input))) {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let dir = fuzz_dir().join("artifacts").join(name);
        let file: String = what.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let path = dir.join(format!("cargo-test-{file}"));
        let kept = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, input)).is_ok();
        panic!(
            "{name} panicked on {what} ({} bytes{}): {msg}",
            input.len(),
            if kept { format!(", kept as {}", path.display()) } else { String::new() }
        );
    }
}

fn replay(name: &str) {
    let seeds = seeds(name);
    assert!(!seeds.is_empty(), "{name}: no seeds, committed or generated");
    for (label, seed) in &seeds {
        run_one(name, label, seed);
        for (how, m) in mutations(seed) {
            run_one(name, &format!("{label}, {how}"), &m);
        }
    }
    let _ = std::fs::remove_dir_all(thread_scratch());
    let _ = std::fs::remove_dir(scratch_root());
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                replay(stringify!($name));
            }
        )*
    };
}

replay_tests!(
    ws_message,
    gguf,
    safetensors,
    hf_config,
    tokenizer,
    sentencepiece,
    ptx,
    esp32_frame,
    esp32_message,
    esp32_node,
    esp32_coordinator,
    bitnet_model,
    llama_model,
);

#[test]
fn every_target_has_seeds_a_corpus_directory_a_cargo_fuzz_binary() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for (name, _) in TARGETS {
        assert!(!seeds(name).is_empty(), "{name}: no seeds");
        assert!(manifest.contains(&format!("name = \"{name}\"")), "fuzz/Cargo.toml: no [[bin]] {name}");
        let body = std::fs::read_to_string(fuzz_dir().join("fuzz_targets").join(format!("{name}.rs")))
            .unwrap_or_else(|e| panic!("fuzz/fuzz_targets/{name}.rs: {e}"));
        assert!(body.contains(&format!("native_host::fuzz::{name}(data)")), "fuzz/fuzz_targets/{name}.rs");
    }
    for name in COMMITTED {
        assert!(!committed(name).is_empty(), "fuzz/corpus/{name}/ is empty");
    }
    for e in std::fs::read_dir(fuzz_dir().join("corpus")).expect("fuzz/corpus") {
        let dir = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(TARGETS.iter().any(|t| t.0 == dir), "fuzz/corpus/{dir}/ names no target");
    }
    for (name, _) in generated() {
        assert!(TARGETS.iter().any(|t| t.0 == *name), "seed_corpus names no target {name}");
    }
}

#[test]
fn the_committed_client_messages_named_ok_decode_and_the_others_do_not() {
    for (file, bytes) in committed("ws_message") {
        let got = ClientMessage::from_json(std::str::from_utf8(&bytes).unwrap());
        assert_eq!(got.is_ok(), file.starts_with("ok-"), "{file}: {got:?}");
    }
}

/// The generated seeds are inputs the parsers accept, so fuzzing starts deep.
#[test]
fn the_generated_seeds_are_inputs_the_parsers_accept() {
    let seeds = generated_for;
    let small = seeds("bitnet_model").next().expect("a bitnet seed");
    let model = load::load(Arc::new(small.clone())).expect("the small BitNet seed loads");
    assert_eq!(model.config, small_bitnet(2));
    for f in seeds("llama_model") {
        let file = GgufFile { bytes: f.clone(), gguf: Gguf::parse(f).unwrap() };
        let (c, float) = gguf_model::load_float(&file, Path::new("seed")).expect("a llama seed loads");
        QwenModel::from_float(c, &float).expect("and converts");
        TextTokenizer::from_gguf(&file.gguf, Path::new("seed")).expect("with its tokenizer");
    }
    assert_eq!(seeds("llama_model").count(), 3);
    assert_eq!(seeds("safetensors").count(), 4, "three directories and the empty shard");
    for t in seeds("tokenizer") {
        let t = TextTokenizer::from_bytes(t, Path::new("seed")).expect("the generated tokenizer.json loads");
        assert!(!t.encode("hello").unwrap().is_empty());
    }
    for p in seeds("sentencepiece") {
        assert_eq!(crate::bitnet::hf::sentencepiece(p).expect("the proto parses").len(), 6);
    }
    // The recorded cluster session replays: the node answers every request without an
    // error, and the coordinator, told the node's answers, generates the same tokens.
    let asked = seeds("esp32_node").next().expect("a recorded session");
    let answers = node_session(asked);
    assert!(answers.iter().all(|a| !matches!(a, Response::Error(_))), "{answers:?}");
    assert!(answers.iter().any(|a| matches!(a, Response::Rows { .. })));
    let told = seeds("esp32_coordinator").next().expect("a recorded session");
    let summary = coordinator_session(told).expect("the recorded answers satisfy the coordinator");
    assert_eq!(summary.tokens.len(), TOKENS);
}

/// Writes the generated seeds into `fuzz/corpus/<target>/gen-*` for libFuzzer:
/// `cargo test -p native-host --lib fuzz::tests::write_generated_seeds -- --ignored`.
#[test]
#[ignore = "writes fuzz/corpus/*/gen-*; run it before `cargo fuzz run`"]
fn write_generated_seeds() {
    let n = write_seed_corpus(&fuzz_dir().join("corpus")).unwrap();
    eprintln!("wrote {n} seeds under {}", fuzz_dir().join("corpus").display());
}

// Inputs that panicked when this harness was written (found by reading the parsers and
// confirmed by these tests); each parser now refuses them with an error.

#[test]
fn regression_tl2_tensor_size_overflows() {
    let mut w = GgufWriter::default();
    w.tensor("t", &[u64::MAX, 1], GgmlType::TL2, Vec::new());
    run_one("gguf", "a TL2 tensor of shape [u64::MAX, 1]", &w.to_bytes());
}

#[test]
fn regression_tensor_bytes_overflow_after_the_element_count() {
    // Found by libFuzzer (fuzz/corpus/gguf/crash-block-bytes-overflow.gguf): the element count
    // fits a u64, the bytes do not.
    let mut w = GgufWriter::default();
    w.tensor("t", &[1 << 62], GgmlType::F32, Vec::new());
    run_one("gguf", "an f32 tensor of 2^62 elements", &w.to_bytes());
    assert_eq!(GgmlType::F32.tensor_bytes(&[1 << 62]), None);
    assert_eq!(GgmlType::F32.tensor_bytes(&[1 << 20]), Some(4 << 20));
    // And TL2's second term (fuzz/corpus/gguf/crash-tl2-rows-overflow.gguf): 2^61 rows of 256.
    assert_eq!(GgmlType::TL2.tensor_bytes(&[256, 1 << 61]), None);
    // The formula as bitnet.cpp's ggml_nbytes gives it, on a real shape (K = 768, M = 3072).
    let (k, m) = (768u64, 3072u64);
    let want = ((k - 256) * m / 3 * 5 / 8 + 256 * m / 2 * 4 / 8).next_multiple_of(32) + 32;
    assert_eq!(GgmlType::TL2.tensor_bytes(&[k, m]), Some(want));
}

#[test]
fn regression_ptx_shared_size_overflows() {
    let text = ".visible .entry k(\n)\n{\n.shared .align 4 .b32 s[4611686018427387904];\nret;\n}\n";
    run_one("ptx", ".shared .b32 s[2^62]", text.as_bytes());
}

#[test]
fn regression_ptx_shared_size_rounding_overflows() {
    let text = ".visible .entry k(\n)\n{\n.shared .align 4 .b8 s[18446744073709551615];\nret;\n}\n";
    run_one("ptx", ".shared .b8 s[usize::MAX]", text.as_bytes());
}

#[test]
fn regression_gguf_head_count_overflows_the_layer_shapes() {
    let mut w = GgufWriter::default();
    w.meta("general.architecture", Value::String("qwen3".into()))
        .meta("qwen3.embedding_length", Value::U32(8))
        .meta("qwen3.feed_forward_length", Value::U32(8))
        .meta("qwen3.block_count", Value::U32(1))
        .meta("qwen3.attention.head_count", Value::U64(1 << 62))
        .meta("qwen3.attention.key_length", Value::U32(128));
    w.f32_tensor("token_embd.weight", &[8, 4], &[0.0; 32]);
    run_one("llama_model", "qwen3 with 2^62 heads", &w.to_bytes());
}

#[test]
fn regression_config_json_head_count_overflows_the_layer_shapes() {
    let json = r#"{"architectures":["Qwen3ForCausalLM"],"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4611686018427387904,"head_dim":128,"vocab_size":4}"#;
    run_one("hf_config", "Qwen3 config with 2^62 heads", json.as_bytes());
}

#[test]
fn regression_a_node_reporting_huge_counts_overflows_the_coordinators_cost_model() {
    let told = generated_for("esp32_coordinator").next().expect("a recorded session");
    let mut rows_seen = false;
    let script: Vec<u8> = records(told)
        .flat_map(|(cmd, flags, payload)| match Response::decode(cmd, payload) {
            Ok(Response::Rows { rows, counts, wall_us }) if !rows_seen => {
                rows_seen = true;
                let counts = Counts { flops: u64::MAX, ..counts };
                let (cmd, payload) = Response::Rows { rows, counts, wall_us }.encode();
                record(cmd, flags, &payload)
            }
            _ => record(cmd, flags, payload),
        })
        .collect();
    assert!(rows_seen);
    run_one("esp32_coordinator", "a node answering a forward with u64::MAX flops", &script);
}

#[test]
fn regression_many_labels_are_refused_before_the_quadratic_post_dominators() {
    let mut text = String::from(".visible .entry k(\n)\n{\n");
    for i in 0..50_000 {
        text.push_str(&format!("$L{i}:\nbra.uni $L{};\n", i + 1));
    }
    text.push_str("$L50000:\nret;\n}\n");
    let e = kernels_wasm::qwengpu::lower::compile(&text, None, &MachineSpec::default()).unwrap_err();
    assert!(e.to_string().contains("basic blocks"), "{e}");
}

#[test]
fn regression_a_stream_of_bad_magics_decodes_in_linear_time() {
    // 4 MiB of magics whose headers fail their CRC: each is one corruption, two bytes long.
    // Dropping two bytes from the front of the buffer each time took hours; now it is linear.
    let stream: Vec<u8> = std::iter::repeat_n([0xA5, 0x5A], 2 << 20).flatten().collect();
    let mut d = Decoder::default();
    d.push(&stream);
    let mut corrupt = 0;
    while let Some(x) = d.next_frame() {
        assert!(matches!(x, Decoded::Corrupt(_)));
        corrupt += 1;
    }
    assert!(corrupt > 1 << 20, "{corrupt}");
    assert!(d.pending() < 16);
}
