//! Coverage-guided fuzzing (cargo fuzz / libFuzzer) of every parser that takes bytes from outside
//! this process: each `pub fn <target>(data: &[u8])` below feeds `data` to the real parser (and to
//! what builds on the parsed result) and must never panic, whatever the bytes; errors are fine.
//! `fuzz/fuzz_targets/<target>.rs` is one line calling the function of the same name.
//!
//! | target | the bytes | what reads them |
//! | --- | --- | --- |
//! | [`ws_message`] | a websocket text frame from the page | `ClientMessage::from_json` (the bridge's reader) |
//! | [`gguf`] | a model file (the models directory) | `Gguf::parse`, `dequantize`, `FileFormat::sniff` |
//! | [`safetensors`] | a Hugging Face shard | `SafeTensors::deserialize`, `ebpf::hf::to_f32`, `ebpf::hf::load` |
//! | [`hf_config`] | a Hugging Face `config.json` | `ebpf::hf::read_config` / `load`, `bitnet::hf::read` |
//! | [`tokenizer`] | a `tokenizer.json` | `TextTokenizer::from_bytes` (= `from_file`), then encode/decode |
//! | [`sentencepiece`] | a SentencePiece `tokenizer.model` | `bitnet::hf::sentencepiece` |
//! | [`ptx`] | PTX text (the qwenGPU tab's editor) | `qwengpu::lower::compile`, then the interpreter |
//! | [`esp32_frame`] | bytes on an ESP32 link (TCP or UART) | `esp32::wire::Decoder` |
//! | [`esp32_message`] | one frame's command and payload | `esp32::msg::Request::decode` / `Response::decode` |
//! | [`esp32_node`] | a coordinator's requests, to an emulated node | `esp32::Node::on_decoded` |
//! | [`esp32_coordinator`] | a node's answers, to the coordinator | `esp32::Cluster` (connect, load, generate) |
//! | [`bitnet_model`] | a BitNet GGUF | `bitnet::model::load`, its tokenizer, a forward pass, `fewest_nodes` |
//! | [`llama_model`] | a llama / qwen2 / qwen3 GGUF | `gguf_model::load_float`, `Model::from_float`, its tokenizer |
//!
//! Seeds: `fuzz/corpus/<target>/` holds the committed ones (text formats and bitnet.cpp's GGUF
//! headers); [`seed_corpus`] makes the binary ones with the project's own encoders (GGUF writer,
//! safetensors, the ESP32 wire from a recorded cluster session), and [`write_seed_corpus`] writes
//! them out as `gen-*` files for libFuzzer. The tests below replay every seed, prefixes and byte
//! flips of it through every target, so `cargo test` catches the obvious panics without libFuzzer.

use crate::ebpf::gguf_model::{self, GgufFile};
use crate::ebpf::hf;
use crate::ebpf::tokenize::TextTokenizer;
use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::bitnet::blob::Shared;
use kernels_wasm::bitnet::model::par::Single;
use kernels_wasm::bitnet::model::sample::Sampler;
use kernels_wasm::bitnet::model::tokenizer::Tokenizer as BitnetTokenizer;
use kernels_wasm::bitnet::model::{self as bitnet, dummy, load, write, Cache, Exec, Logits, Quant};
use kernels_wasm::esp32::budget::{Budget, KIB, MIB};
use kernels_wasm::esp32::coord::{self, Cluster, Link, LinkError, Peer, Timing};
use kernels_wasm::esp32::local::Local;
use kernels_wasm::esp32::msg::{Caps, Counts, Request, Response, Stats};
use kernels_wasm::esp32::wire::{self, Decoded, Decoder, Frame};
use kernels_wasm::esp32::Node;
use kernels_wasm::gguf::{GgmlType, Gguf, GgufWriter, Value};
use kernels_wasm::protocol::{ClientMessage, FileFormat, MAX_FRAME_BYTES};
use kernels_wasm::qwen3::model::{Config as QwenConfig, Model as QwenModel};
use kernels_wasm::qwengpu::interp::{Launch, Machine};
use kernels_wasm::qwengpu::isa::MachineSpec;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

mod harness;
mod seeds;
#[cfg(test)]
mod tests;

use harness::*;
pub use harness::{record, records, scratch_root, Records};
use seeds::*;
pub use seeds::{seed_corpus, sentencepiece_proto, write_seed_corpus};

/// Largest input a target reads; longer ones return at once, so no run allocates without bound
/// because of the harness itself.
pub const MAX_INPUT: usize = 1 << 20;
/// Largest PTX text [`ptx`] reads (lowering refuses a kernel of more basic blocks than the ROM
/// could hold before its quadratic post-dominator sets, so a megabyte is cheap).
pub const MAX_PTX: usize = MAX_INPUT;
/// Largest byte stream [`esp32_frame`] reads (the decoder consumes its buffer in linear time).
pub const MAX_STREAM: usize = MAX_INPUT;
/// Records (frames) one [`esp32_node`] or [`esp32_coordinator`] session takes.
pub const MAX_RECORDS: usize = 512;

/// Every target by name: the names of `fuzz/fuzz_targets/*.rs` and of `fuzz/corpus/*/`.
/// A target: bytes in, no panic out.
pub type Target = fn(&[u8]);

pub const TARGETS: &[(&str, Target)] = &[
    ("ws_message", ws_message),
    ("gguf", gguf),
    ("safetensors", safetensors),
    ("hf_config", hf_config),
    ("tokenizer", tokenizer),
    ("sentencepiece", sentencepiece),
    ("ptx", ptx),
    ("esp32_frame", esp32_frame),
    ("esp32_message", esp32_message),
    ("esp32_node", esp32_node),
    ("esp32_coordinator", esp32_coordinator),
    ("bitnet_model", bitnet_model),
    ("llama_model", llama_model),
];

// ---------------------------------------------------------------------------------------------
// The targets.

/// A websocket text frame, decoded exactly as the bridge's reader does
/// (`bridge::connection::Conn::on_text` → [`ClientMessage::from_json`]). tungstenite hands the
/// bridge only UTF-8 text frames, so other bytes never reach the decoder. What decodes must
/// encode and decode back to itself (the page and the bridge share these types).
pub fn ws_message(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(message) = ClientMessage::from_json(text) else { return };
    let json = message.to_json();
    // Defaults the input left out are written out, so a frame at the limit may grow past it.
    if json.len() <= MAX_FRAME_BYTES {
        assert_eq!(ClientMessage::from_json(&json), Ok(message), "re-encoded as {json}");
    }
}

/// A GGUF file: the header, metadata and tensor descriptors ([`Gguf::parse`]), then every
/// tensor's data dequantised where the type allows (at most 16 MiB of tensor bytes per input),
/// and the format sniffing of the bridge's `model_info`.
pub fn gguf(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let _ = FileFormat::sniff(&data[..data.len().min(16)]);
    let Ok(g) = Gguf::parse(data) else { return };
    for v in g.metadata.values() {
        let _ = (v.as_u64(), v.as_f64(), v.as_str(), v.as_array().map(<[Value]>::len));
    }
    // Tensors may share their bytes: bound the work, not only the input.
    let mut budget = 16usize << 20;
    for t in &g.tensors {
        assert!(t.offset.checked_add(t.bytes).is_some_and(|end| end <= data.len()), "{}: past the end", t.name);
        let Some(left) = budget.checked_sub(t.bytes) else { break };
        budget = left;
        if let Ok(values) = g.dequantize(data, t) {
            assert_eq!(values.len() as u64, t.elements(), "{}: one value per element", t.name);
        }
    }
}

/// A safetensors shard: the `safetensors` crate's parser and our f32 conversion of every tensor
/// in memory, then the directory loader of `ebpf run --model DIR` and the bridge's `ebpf_run`
/// ([`hf::load`]) with these bytes as `model.safetensors` beside a config.json of the shape of
/// the generated seeds (so a seed loads, and its mutations reach the shape checks).
pub fn safetensors(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let _ = FileFormat::sniff(&data[..data.len().min(16)]);
    if let Ok(st) = ::safetensors::SafeTensors::deserialize(data) {
        for (name, view) in st.tensors() {
            let _ = crate::bitnet::hf::gguf_name(&name);
            let shape = view.shape().to_vec();
            let _ = hf::to_f32(&name, &view, &shape);
        }
    }
    let Some(dir) = scratch("safetensors") else { return };
    if !dir.join("config.json").exists() && hf::write_random(&dir, QWEN_TINY[0], 1).is_err() {
        return;
    }
    if std::fs::write(dir.join("model.safetensors"), data).is_ok() {
        let _ = hf::load(&dir);
    }
}

/// A Hugging Face `config.json`, read by the loaders that take a model directory: the eBPF
/// engine's ([`hf::architecture`], [`hf::read_config`], then [`hf::load`], which derives every
/// layer's tensor shapes from the config before it finds the tensor-less shard beside it lacking
/// them) and `bitnet convert`'s ([`crate::bitnet::hf::read`], which stops at the missing
/// tokenizer.model).
pub fn hf_config(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Some(dir) = scratch("hf_config") else { return };
    let shard = dir.join("model.safetensors");
    if !shard.exists() && std::fs::write(&shard, empty_safetensors()).is_err() {
        return;
    }
    if std::fs::write(dir.join("config.json"), data).is_err() {
        return;
    }
    let _ = hf::architecture(&dir);
    let _ = hf::read_config(&dir);
    let _ = hf::load(&dir);
    let _ = crate::bitnet::hf::read(&dir);
}

/// A `tokenizer.json` (a model directory's, or `--tokenizer`): loaded as
/// [`TextTokenizer::from_file`] loads it, then used as the bridge uses it (prompt in, pieces out).
pub fn tokenizer(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    tolerate_tokenizers_panics();
    if let Ok(t) = TextTokenizer::from_bytes(data, Path::new("tokenizer.json")) {
        use_tokenizer(&t);
    }
}

/// The `tokenizers` crate panics on some malformed files; [`TextTokenizer::from_bytes`] catches
/// that and returns an error. libFuzzer's panic hook aborts before any `catch_unwind` sees the
/// panic, so this hook passes over panics raised inside that crate (only those) and hands every
/// other one to the hook it replaced.
fn tolerate_tokenizers_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.location().is_some_and(|l| l.file().contains("/tokenizers-")) {
                previous(info)
            }
        }));
    });
}

/// A SentencePiece `tokenizer.model` (protobuf), as `bitnet convert` reads it from a Hugging
/// Face BitNet checkpoint.
pub fn sentencepiece(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let _ = crate::bitnet::hf::sentencepiece(data);
}

/// PTX text, parsed and lowered for qwenGPU's machine (`lower::compile` with
/// `MachineSpec::default()`, as the qwenGPU tab does with its editor's text); a kernel that
/// lowers then runs on the reference interpreter for a bounded number of steps.
pub fn ptx(data: &[u8]) {
    if data.len() > MAX_PTX {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let spec = MachineSpec::default();
    let Ok(kernel) = kernels_wasm::qwengpu::lower::compile(text, None, &spec) else { return };
    let input: Vec<u32> = (0..spec.global_words as u32).collect();
    // Parameters as the suite passes arrays: byte addresses into global memory.
    let params = (0..kernel.params.len() as u32).map(|i| 4 * 16 * i).collect();
    let launch = Launch { grid: 2, block: 8, params };
    if let Ok(mut m) = Machine::new(spec, kernel.program, &input, launch) {
        let _ = m.run(2_000);
    }
}

/// Bytes from an ESP32 link (the emulated node's TCP socket, a serial port, the coordinator's
/// side of either), reassembled by [`Decoder`]. However the stream is split, the same frames
/// come out; each re-encodes to a stream that gives it back.
pub fn esp32_frame(data: &[u8]) {
    if data.len() > MAX_STREAM {
        return;
    }
    let whole = decode_frames([data]);
    // Chunk sizes 1 to 32, chosen by the first byte.
    let step = 1 + data.first().map_or(0, |&b| (b % 32) as usize);
    assert_eq!(decode_frames(data.chunks(step)), whole, "frames depend on how the stream was split ({step})");
    for f in &whole {
        let bytes = wire::encode(f.cmd, f.seq, &f.payload);
        assert_eq!(decode_frames([&bytes[..]]), std::slice::from_ref(f), "a decoded frame re-encodes to itself");
    }
}

/// One frame's command byte (the first byte) and payload (the rest), decoded as a request (what
/// a node reads) and as a response (what the coordinator reads). What decodes re-encodes to the
/// same command and decodes again to the same bytes.
pub fn esp32_message(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Some((&cmd, payload)) = data.split_first() else { return };
    if let Ok(req) = Request::decode(cmd, payload) {
        let (c, p) = req.encode();
        assert_eq!(c, cmd, "{req:?}");
        let again = Request::decode(c, &p).expect("a re-encoded request decodes");
        assert!(again.encode() == (c, p), "a re-encoded request decodes to the same bytes");
    }
    if let Ok(resp) = Response::decode(cmd, payload) {
        let (c, p) = resp.encode();
        assert_eq!(c, cmd, "{resp:?}");
        let again = Response::decode(c, &p).expect("a re-encoded response decodes");
        assert!(again.encode() == (c, p), "a re-encoded response decodes to the same bytes");
    }
}

/// A coordinator's requests to an emulated node (`native-host esp32 node` serves any TCP peer),
/// as [`records`]: the harness frames each one (right CRCs, so the fuzzer explores the messages
/// and the node's state machine rather than the checksums; flags repeat a sequence number, damage
/// a bit or reconnect). The node's memory is an ESP32-S3's (512 KiB SRAM, 8 MiB PSRAM), so
/// nothing it allocates is unbounded. Every answer it sends is a good frame that decodes.
pub fn esp32_node(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let _ = node_session(data);
}

/// A node's answers to the coordinator (a hostile or broken board), as [`records`]: the
/// harness frames each as the answer to the coordinator's latest request (flags: sequence 0, a
/// wrong sequence number, a damaged bit). The coordinator connects, loads a small BitNet model
/// (a fixed file: models come from the local models directory, not from nodes) and generates two
/// tokens, all of which must end in an answer or an error, never a panic.
pub fn esp32_coordinator(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let _ = coordinator_session(data);
}

/// A BitNet GGUF as the BitNet tab, `bitnet run` and the ESP32 cluster read it: its tokenizer,
/// the coordinator's split of its blocks ([`coord::fewest_nodes`]), the model
/// ([`load::load`]), and for a model that loads, two tokens through the forward pass on the
/// scalar kernels, this machine's best and the f32 reference.
pub fn bitnet_model(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(g) = Gguf::parse(data) else { return };
    if let Ok(Some(t)) = BitnetTokenizer::from_gguf(&g) {
        if let Ok(ids) = t.encode("Hello world, ünïcode 😀", true) {
            let _ = t.decode(&ids);
        }
        let _ = (t.piece(0), t.piece(u32::MAX), t.token(1));
    }
    let _ = coord::fewest_nodes(&g, data, 64, Budget::default());
    let shared: Shared = Arc::new(data.to_vec());
    let Ok(model) = load::load(shared) else { return };
    let c = &model.config;
    let tokens = [0, c.vocab.saturating_sub(1).min(1) as u32];
    for ex in bitnet_execs() {
        // The f32 reference rounds nothing, so it keeps f32 keys and values.
        let mut cache = if ex.reference { Cache::f32(c, tokens.len()) } else { Cache::new(c, tokens.len()) };
        for t in tokens {
            if let Ok(logits) = model.forward(&[t], &mut cache, &ex, Logits::Last) {
                assert_eq!(logits.len(), c.vocab, "one logit per token of the vocabulary");
            }
        }
    }
}

/// A llama / qwen2 / qwen3 GGUF as the eBPF engine reads it (`ebpf::models::load`): the
/// tokenizer it carries ([`TextTokenizer::from_gguf`], then used), every tensor dequantised into
/// the f32 model ([`gguf_model::load_float`]) and converted to the golden model's fixed point
/// ([`QwenModel::from_float`]).
pub fn llama_model(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(gguf) = Gguf::parse(data) else { return };
    let path = Path::new("fuzz.gguf");
    let file = GgufFile { bytes: data.to_vec(), gguf };
    let _ = file.architecture();
    if let Ok(t) = TextTokenizer::from_gguf(&file.gguf, path) {
        use_tokenizer(&t);
    }
    if let Ok((config, float)) = gguf_model::load_float(&file, path) {
        let _ = QwenModel::from_float(config, &float);
    }
}
