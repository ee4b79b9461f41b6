//! Seeds made with the project's own encoders (GGUF writer, safetensors, the ESP32 wire from a
//! recorded cluster session), for the formats that are binary.

use super::*;

// ---------------------------------------------------------------------------------------------
// Generated seeds.

/// A BitNet shape small enough for seeds: one block of 128.
pub(crate) fn small_bitnet(kv_heads: usize) -> bitnet::Config {
    bitnet::Config {
        vocab: 64,
        dim: 128,
        ffn: 128,
        layers: 1,
        heads: 2,
        kv_heads,
        rope_base: 10000.0,
        eps: 1e-5,
        context: 32,
    }
}

/// A dummy BitNet model file of `c`, from the project's writer (`None` if the format refuses
/// the shape).
pub(crate) fn bitnet_seed(c: &bitnet::Config, quant: Quant, embed: GgmlType, output: bool) -> Option<Vec<u8>> {
    let tensors = write::tensors(c, quant, embed, output);
    write::to_bytes(&dummy::metadata(c, "fuzz seed", quant), &tensors, |n, k| Ok(dummy::values(7, n, k))).ok()
}

pub(crate) fn bitnet_seeds() -> Vec<Vec<u8>> {
    let wide = bitnet::Config { dim: 256, ffn: 256, heads: 4, ..small_bitnet(2) };
    [
        (small_bitnet(2), Quant::I2s, GgmlType::F16, false),
        (small_bitnet(1), Quant::I2s, GgmlType::F32, true),
        (small_bitnet(2), Quant::Tl1, GgmlType::F16, false),
        (wide, Quant::Tl2, GgmlType::F16, false),
    ]
    .iter()
    .filter_map(|(c, q, e, o)| bitnet_seed(c, *q, *e, *o))
    .collect()
}

pub(crate) const fn tiny_qwen(qk_norm: bool, qkv_bias: bool) -> QwenConfig {
    QwenConfig {
        hidden: 16,
        intermediate: 32,
        layers: 1,
        heads: 2,
        kv_heads: 1,
        head_dim: 8,
        vocab: 16,
        rope_theta: 1e6,
        rms_eps: 1e-6,
        qk_norm,
        qkv_bias,
    }
}

/// Tiny Qwen3 (QK-norm), Llama (neither) and Qwen2 (q/k/v biases) shapes.
pub(crate) const QWEN_TINY: [QwenConfig; 3] = [tiny_qwen(true, false), tiny_qwen(false, false), tiny_qwen(false, true)];

/// A byte-level BPE vocabulary of 16 tokens (three of them special) and its merges.
pub(crate) const BPE_TOKENS: [&str; 16] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "a",
    "d",
    "e",
    "h",
    "l",
    "o",
    "r",
    "w",
    "Ġ",
    "he",
    "ll",
    "hell",
    "hello",
];
pub(crate) const BPE_MERGES: [&str; 4] = ["h e", "l l", "he ll", "hell o"];
pub(crate) const CHAT_TEMPLATE: &str = "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\nYou are a fuzzing assistant.<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}";

/// The tokenizer metadata of a GGUF whose tokenizer is byte-level BPE with pre-tokenizer `pre`.
pub(crate) fn bpe_metadata(w: &mut GgufWriter, pre: &str) {
    let strings = |v: &[&str]| Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect());
    let types = (0..BPE_TOKENS.len()).map(|i| Value::I32(if i < 3 { 3 } else { 1 })).collect();
    w.meta("tokenizer.ggml.model", Value::String("gpt2".into()))
        .meta("tokenizer.ggml.pre", Value::String(pre.into()))
        .meta("tokenizer.ggml.tokens", strings(&BPE_TOKENS))
        .meta("tokenizer.ggml.token_type", Value::Array(types))
        .meta("tokenizer.ggml.merges", strings(&BPE_MERGES))
        .meta("tokenizer.ggml.bos_token_id", Value::U32(0))
        .meta("tokenizer.chat_template", Value::String(CHAT_TEMPLATE.into()));
}

/// llama / qwen2 / qwen3 GGUFs with random weights and a BPE tokenizer, from the eBPF engine's
/// writer.
pub(crate) fn llama_seeds() -> Vec<Vec<u8>> {
    let pres = ["qwen2", "llama-bpe", "smollm"];
    QWEN_TINY
        .iter()
        .zip(pres)
        .enumerate()
        .filter_map(|(i, (&c, pre))| {
            let mut w = gguf_model::float_writer(c, &QwenModel::random_float(c, 1 + i as u64)).ok()?;
            bpe_metadata(&mut w, pre);
            Some(w.to_bytes())
        })
        .collect()
}

/// A GGUF with a value of every metadata type and a tensor of every ggml type (non-zero data).
pub(crate) fn gguf_every_type() -> Vec<u8> {
    use GgmlType::*;
    let mut w = GgufWriter::default();
    w.meta("general.architecture", Value::String("fuzz".into()))
        .meta("general.alignment", Value::U32(32))
        .meta("t.u8", Value::U8(1))
        .meta("t.i8", Value::I8(-1))
        .meta("t.u16", Value::U16(2))
        .meta("t.i16", Value::I16(-2))
        .meta("t.u32", Value::U32(3))
        .meta("t.i32", Value::I32(-3))
        .meta("t.u64", Value::U64(4))
        .meta("t.i64", Value::I64(-4))
        .meta("t.f32", Value::F32(0.5))
        .meta("t.f64", Value::F64(-0.25))
        .meta("t.bool", Value::Bool(true))
        .meta("t.string", Value::String("ünïcode".into()))
        .meta("t.array.u32", Value::Array(vec![Value::U32(1), Value::U32(2)]))
        .meta("t.array.string", Value::Array(vec![Value::String("a".into()), Value::String("b c".into())]))
        .meta("t.array.empty", Value::Array(Vec::new()));
    let dims = [256u64, 2];
    for ty in [F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, I2_S, TL1, TL2] {
        let bytes = ty.tensor_bytes(&dims).unwrap_or(0) as usize;
        w.tensor(&format!("{ty:?}"), &dims, ty, (0..bytes).map(|i| (i * 37 % 251) as u8).collect());
    }
    w.to_bytes()
}

/// One of every client message, from the protocol's own encoder.
pub(crate) fn client_messages() -> Vec<ClientMessage> {
    use kernels_wasm::protocol::ebpf::{EbpfModel, EbpfPrompt};
    use kernels_wasm::protocol::esp32::{Esp32Model, Esp32Run};
    use kernels_wasm::protocol::{FileRoot, Request as Op, PROTOCOL_VERSION};
    let esp32 = |model: Esp32Model, sram: Option<u64>| {
        Op::Esp32Run(Esp32Run {
            model,
            nodes: 2,
            prompt: "Once upon a time".into(),
            max_tokens: 8,
            sram,
            psram: sram.map(|s| s * 16),
            link_bps: sram.map(|_| 921_600),
        })
    };
    let requests = vec![
        Op::Ping { nonce: 42, delay_ms: 0 },
        Op::Probe,
        Op::ListModels,
        Op::ModelInfo { root: FileRoot::Models, path: "qwen3/model.gguf".into() },
        Op::ModelInfo { root: FileRoot::Assets, path: "kernels/vadd.ptx".into() },
        Op::EbpfRun {
            model: EbpfModel::TinyRandom { seed: 1 },
            prompt: EbpfPrompt::Ids { ids: vec![1, 2, 3] },
            max_tokens: 4,
            threads: 2,
        },
        Op::EbpfRun {
            model: EbpfModel::Path { path: "SmolLM2-135M".into() },
            prompt: EbpfPrompt::Text { text: "Hello \"world\"\n".into(), chat: true },
            max_tokens: 8,
            threads: 1,
        },
        Op::QwengpuCompile {
            cuda: "#include \"qwengpu.h\"\n__global__ void k(int *a) { a[threadIdx.x] += 1; }\n".into(),
        },
        esp32(Esp32Model::Fixture, Some(512 * 1024)),
        esp32(Esp32Model::Dummy { size: "tiny".into(), quant: "i2_s".into() }, None),
        esp32(Esp32Model::Path { path: "bitnet.gguf".into() }, Some(1 << 20)),
    ];
    let mut all = vec![
        ClientMessage::Hello { protocol: PROTOCOL_VERSION, client: "fuzz seed".into() },
        ClientMessage::Cancel { id: u64::MAX },
    ];
    all.extend(
        requests.into_iter().enumerate().map(|(i, request)| ClientMessage::Request { id: i as u64 + 1, request }),
    );
    all
}

/// config.json and model.safetensors of tiny Qwen3, Llama and Qwen2 directories, from the eBPF
/// engine's writer (the Qwen3's is the shape [`safetensors`] loads against).
pub(crate) fn hf_seeds() -> Vec<(Vec<u8>, Vec<u8>)> {
    let Some(dir) = scratch("seed-hf") else { return Vec::new() };
    let out = QWEN_TINY
        .iter()
        .enumerate()
        .filter_map(|(i, &c)| {
            hf::write_random(&dir, c, 1 + i as u64).ok()?;
            Some((std::fs::read(dir.join("config.json")).ok()?, std::fs::read(dir.join("model.safetensors")).ok()?))
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// A tokenizer.json from the `tokenizers` crate's own serialiser: the BPE of [`BPE_TOKENS`]
/// with the byte-level pre-tokenizer and decoder and special tokens, as `from_gguf` builds it.
pub(crate) fn generated_tokenizer_json() -> Option<Vec<u8>> {
    use tokenizers::models::bpe::{Vocab, BPE};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    let vocab: Vocab = BPE_TOKENS.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
    let merges = BPE_MERGES.iter().filter_map(|m| m.split_once(' ')).map(|(a, b)| (a.into(), b.into())).collect();
    let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().ok()?;
    let mut t = tokenizers::Tokenizer::new(bpe);
    t.with_pre_tokenizer(Some(tokenizers::PreTokenizerWrapper::from(ByteLevel::new(false, true, true))));
    t.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
    let special: Vec<tokenizers::AddedToken> =
        BPE_TOKENS[..3].iter().map(|s| tokenizers::AddedToken::from(s.to_string(), true)).collect();
    t.add_special_tokens(&special);
    t.to_string(false).ok().map(String::into_bytes)
}

/// A SentencePiece `ModelProto`: the pieces (field 1: piece, score, type), then fields the
/// reader skips, one of each wire type (a trainer and a normaliser spec, a fixed64, a fixed32).
pub fn sentencepiece_proto<S: AsRef<str>>(pieces: &[(S, f32, i32)]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    let mut out = Vec::new();
    for (piece, score, ty) in pieces {
        let piece = piece.as_ref();
        let mut m = vec![0x0a];
        varint(&mut m, piece.len() as u64);
        m.extend_from_slice(piece.as_bytes());
        m.push(0x15);
        m.extend_from_slice(&score.to_le_bytes());
        m.push(0x18);
        varint(&mut m, *ty as u64);
        out.push(0x0a);
        varint(&mut out, m.len() as u64);
        out.extend_from_slice(&m);
    }
    out.extend_from_slice(&[0x12, 0x04, 0x08, 0x01, 0x10, 0x02]);
    out.extend_from_slice(&[0x1a, 0x02, 0x08, 0x00]);
    out.push(0x21);
    out.extend_from_slice(&1u64.to_le_bytes());
    out.push(0x2d);
    out.extend_from_slice(&2u32.to_le_bytes());
    out
}

/// bitnet.cpp's tiny I2_S model (`assets/fixtures/bitnet-cpp/`), if this is a checkout.
pub(crate) fn bitnet_cpp_fixture() -> Option<Vec<u8>> {
    std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/fixtures/bitnet-cpp/tiny.i2_s.gguf")).ok()
}

/// Seeds for every target that the project's own encoders make (target name, input): the binary
/// formats, which are not committed. The committed seeds are in `fuzz/corpus/<target>/`.
pub fn seed_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
    for m in client_messages() {
        out.push(("ws_message", m.to_json().into_bytes()));
    }
    let every = gguf_every_type();
    let mut v2 = every.clone();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    out.extend([("gguf", every), ("gguf", v2)]);
    for f in bitnet_seeds() {
        out.push(("gguf", f.clone()));
        out.push(("bitnet_model", f));
    }
    if let Some(f) = bitnet_cpp_fixture().filter(|f| f.len() <= MAX_INPUT) {
        out.push(("bitnet_model", f));
    }
    for f in llama_seeds() {
        out.push(("gguf", f.clone()));
        out.push(("llama_model", f));
    }
    for (config, shard) in hf_seeds() {
        out.push(("hf_config", config));
        out.push(("safetensors", shard));
    }
    out.push(("hf_config", b"{}".to_vec()));
    out.push(("safetensors", empty_safetensors()));
    if let Some(json) = generated_tokenizer_json() {
        out.push(("tokenizer", json));
    }
    out.push((
        "sentencepiece",
        sentencepiece_proto(&[
            ("<unk>", 0.0, 2),
            ("<s>", 0.0, 3),
            ("</s>", 0.0, 3),
            ("<0x41>", 0.0, 6),
            ("\u{2581}hello", -1.5, 1),
            ("\u{2581}w\u{00f6}rld", -2.25, 1),
        ]),
    ));
    if let Some((requests, answers)) = recorded_session() {
        let (asked, told) = (decode_frames([&requests[..]]), decode_frames([&answers[..]]));
        out.push(("esp32_node", asked.iter().flat_map(|f| record(f.cmd, 0, &f.payload)).collect()));
        out.push(("esp32_coordinator", told.iter().flat_map(|f| record(f.cmd, 0, &f.payload)).collect()));
        for stream in [requests, answers] {
            if stream.len() <= MAX_STREAM {
                out.push(("esp32_frame", stream));
            }
        }
        // One message of each command seen.
        let mut seen = Vec::new();
        for f in asked.iter().chain(&told) {
            if !seen.contains(&f.cmd) {
                seen.push(f.cmd);
                out.push(("esp32_message", [&[f.cmd][..], &f.payload[..]].concat()));
            }
        }
    }
    for resp in [
        Response::Resend,
        Response::Error("blk.0.attn_q.weight: over budget".into()),
        Response::Stats(Stats { forwards: 3, rows: 9, ..Stats::default() }),
        Response::Rows {
            rows: vec![0.5, -1.0, f32::NAN],
            counts: Counts { flops: 7, ..Counts::default() },
            wall_us: 1,
        },
    ] {
        let (cmd, payload) = resp.encode();
        out.push(("esp32_frame", wire::encode(cmd, 9, &payload)));
        out.push(("esp32_message", [&[cmd][..], &payload[..]].concat()));
    }
    for req in [Request::Reset { weights: true }, Request::Forward { start: 3, rows: vec![1.0; 8] }] {
        let (cmd, payload) = req.encode();
        out.push(("esp32_message", [&[cmd][..], &payload[..]].concat()));
    }
    out
}

/// Writes [`seed_corpus`] as `<dir>/<target>/gen-NNN` (after removing earlier `gen-*` files),
/// for libFuzzer to start from; `dir` is normally `fuzz/corpus`. Returns how many it wrote.
pub fn write_seed_corpus(dir: &Path) -> std::io::Result<usize> {
    let seeds = seed_corpus();
    for (name, _) in TARGETS {
        let d = dir.join(name);
        std::fs::create_dir_all(&d)?;
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("gen-")) {
                std::fs::remove_file(p)?;
            }
        }
        for (i, (_, bytes)) in seeds.iter().filter(|s| s.0 == *name).enumerate() {
            std::fs::write(d.join(format!("gen-{i:03}")), bytes)?;
        }
    }
    Ok(seeds.len())
}
