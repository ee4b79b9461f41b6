//! candle (candle-transformers 0.10.2) as the independent oracle of the eBPF engine's f32
//! reference and of its GGUF reader: the same weights through candle's Qwen3 and quantized-llama
//! forward passes must give the same logits, and candle's GGUF dequantiser the same values.

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use kernels_wasm::gguf::{self, GgmlType, Gguf};
use kernels_wasm::qwen3::model::{Config, FloatModel, Model};
use kernels_wasm::qwen3::reference::{top_k, Reference};
use native_host::ebpf::{gguf_model, hf, models};
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("substrates-candle-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Largest |a − b| and whether the top-5 tokens agree.
fn compare(ours: &[f32], theirs: &[f32]) -> (f32, bool) {
    let max = ours.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    (max, top_k(ours, 5) == top_k(theirs, 5))
}

/// The tiny Qwen3 (BF16 safetensors), token by token, through candle's Qwen3 and our reference.
/// Both compute in f32 from the same BF16 weights; they differ only in summation order, so the
/// logits (magnitude ~3) agree to ~1e-5; 1e-3 leaves room and still catches any real error
/// (a wrong RoPE pairing or norm moves them by > 0.1).
#[test]
fn the_f32_reference_equals_candles_qwen3() {
    let dir = scratch("qwen3");
    hf::write_random(&dir, Config::TINY, 21).unwrap();
    let (config, float) = hf::load_float(&dir).unwrap();
    let cfg: candle_transformers::models::qwen3::Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let dev = Device::Cpu;
    // SAFETY: the file was just written by this test and is not modified while mapped.
    let vb = unsafe {
        candle_nn::VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &dev).unwrap()
    };
    let mut candle = candle_transformers::models::qwen3::ModelForCausalLM::new(&cfg, vb).unwrap();
    let mut reference = Reference::new(config, &float);
    for (pos, token) in [5u32, 999, 0, 42, 7, 7].into_iter().enumerate() {
        let input = Tensor::new(&[[token]], &dev).unwrap();
        let theirs: Vec<f32> = candle.forward(&input, pos).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let ours = reference.forward(token as usize);
        let (max, same_top) = compare(&ours, &theirs);
        assert!(max < 1e-3 && same_top, "position {pos}: max |Δlogit| {max}, top-5 equal: {same_top}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A candle quantized-llama model of `path`, every weight dequantised to f32 (so candle's matmuls
/// are f32 like ours, not Q8-quantised activations).
fn candle_llama(path: &std::path::Path) -> candle_transformers::models::quantized_llama::ModelWeights {
    // Read through a thread-local when the model is built, on this thread.
    std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
    let mut file = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    candle_transformers::models::quantized_llama::ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap()
}

/// A tiny llama written as GGUF (q/k permuted as llama.cpp does): our loader undoes the
/// permutation and our reference then equals candle's quantized llama, which rotates adjacent
/// pairs on the permuted rows; and the GGUF loads to exactly the tensors it was written from.
#[test]
fn a_llama_gguf_runs_like_candles_quantized_llama() {
    let (_, c) = Config::TINY_FAMILY[1];
    let mut f: FloatModel = Model::random_float(c, 22);
    f.lm_head = Some(Model::random_float(c, 23).embed);
    let dir = scratch("llama");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-llama.gguf");
    std::fs::write(&path, gguf_model::float_writer(c, &f).unwrap().to_bytes()).unwrap();
    let loaded = models::load(&path, None);
    // No tokenizer in this file: the loader says so by name.
    assert!(loaded.as_ref().err().is_some_and(|e| e.to_string().contains("tokenizer")), "{:?}", loaded.err());
    let file = gguf_model::GgufFile::read(&path).unwrap();
    let (config, float) = gguf_model::load_float(&file, &path).unwrap();
    // GGUF stores ε as f32 (1e-5 → 9.9999997e-6); its Q32 value, all the kernels use, is the same.
    assert_eq!((Config { rms_eps: c.rms_eps, ..config }, config.eps_q32()), (c, c.eps_q32()));
    assert_eq!((float.layers[1].q == f.layers[1].q, float.layers[0].k == f.layers[0].k), (true, true));
    let mut candle = candle_llama(&path);
    let mut reference = Reference::new(config, &float);
    for (pos, token) in [3u32, 141, 59, 26, 535].into_iter().enumerate() {
        let input = Tensor::new(&[[token]], &Device::Cpu).unwrap();
        let theirs: Vec<f32> = candle.forward(&input, pos).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let (max, same_top) = compare(&reference.forward(token as usize), &theirs);
        assert!(max < 1e-3 && same_top, "position {pos}: max |Δlogit| {max}, top-5 equal: {same_top}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn smollm2() -> Option<PathBuf> {
    let p = std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").filter(|p| !p.is_empty()).map(PathBuf::from);
    if p.is_none() {
        eprintln!("SKIPPED: SUBSTRATES_SMOLLM2_GGUF not set (cargo xtask test fetches the model and sets it)");
    }
    p
}

/// Every tensor of the real SmolLM2 file (Q4_1, Q8_0, F32) dequantises to exactly candle's values.
#[test]
fn smollm2_dequantises_exactly_like_candle() {
    let Some(path) = smollm2() else { return };
    let bytes = std::fs::read(&path).unwrap();
    let ours = Gguf::parse(&bytes).unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    assert_eq!(ours.tensors.len(), content.tensor_infos.len());
    let mut kinds = std::collections::BTreeSet::new();
    for t in &ours.tensors {
        let theirs: Vec<f32> = content
            .tensor(&mut file, &t.name, &Device::Cpu)
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let mine = ours.dequantize(&bytes, t).unwrap();
        assert!(mine.iter().map(|v| v.to_bits()).eq(theirs.iter().map(|v| v.to_bits())), "tensor {}", t.name);
        kinds.insert(format!("{:?}", t.ty));
    }
    eprintln!("{} tensors bit-identical to candle's dequantisation; types {kinds:?}", ours.tensors.len());
}

/// The K-quants the file does not use: blocks made by candle's quantiser, read back by both.
#[test]
fn k_quants_dequantise_exactly_like_candle() {
    let values: Vec<f32> =
        (0..4096).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * (1.0 + (i % 13) as f32)).collect();
    let t = Tensor::from_vec(values, (16, 256), &Device::Cpu).unwrap();
    for (dt, ours) in [
        (GgmlDType::Q4K, GgmlType::Q4_K),
        (GgmlDType::Q6K, GgmlType::Q6_K),
        (GgmlDType::Q5_0, GgmlType::Q5_0),
        (GgmlDType::Q5_1, GgmlType::Q5_1),
        (GgmlDType::Q4_0, GgmlType::Q4_0),
    ] {
        let q = QTensor::quantize(&t, dt).unwrap();
        let theirs: Vec<f32> = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let mine = gguf::dequantize(ours, &q.data().unwrap()).unwrap();
        assert!(mine.iter().map(|v| v.to_bits()).eq(theirs.iter().map(|v| v.to_bits())), "{ours:?}");
    }
}

/// The real model: our f32 reference (from our GGUF reader, q/k un-permuted, rotate-half RoPE)
/// against candle's quantized llama (candle's reader, permuted rows, adjacent-pair RoPE), both on
/// the dequantised weights. Same arithmetic up to summation order over 30 layers: logits agree
/// to a few 1e-3 and the greedy tokens are the same.
#[test]
fn smollm2_reference_equals_candles_quantized_llama() {
    let Some(path) = smollm2() else { return };
    let loaded = models::load(&path, None).unwrap();
    let tokenizer = loaded.tokenizer.as_ref().unwrap();
    let ids = tokenizer.encode(&tokenizer.chat_prompt("What is the capital of France?")).unwrap();
    let mut candle = candle_llama(&path);
    let mut reference = Reference::new(loaded.config, &loaded.float);
    let mut worst = 0f32;
    for (pos, &token) in ids.iter().enumerate() {
        let input = Tensor::new(&[[token as u32]], &Device::Cpu).unwrap();
        let theirs: Vec<f32> = candle.forward(&input, pos).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let ours = reference.forward(token);
        let (max, _) = compare(&ours, &theirs);
        worst = worst.max(max);
        assert_eq!(top_k(&ours, 1), top_k(&theirs, 1), "position {pos}: greedy tokens differ");
    }
    eprintln!("SmolLM2 f32 reference vs candle over {} positions: max |Δlogit| {worst}", ids.len());
    assert!(worst < 0.02, "max |Δlogit| {worst}");
}
