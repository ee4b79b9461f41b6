//! The model against bitnet.cpp's own files and outputs (`assets/fixtures/bitnet-cpp`), every
//! kernel against the scalar one, every format against the others, and the f32 reference.

use super::forward::Exec;
use super::par::{Parallel, Single};
use super::write::{self, Kind, Values};
use super::*;
use crate::bitnet::backend::Backend;
use crate::bitnet::blob::Shared;
use crate::bitnet::quant::{quantize_activations, Rounding, TernaryMatrix};
use crate::gguf::GgmlType;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const I2S: &[u8] = include_bytes!("../../../../assets/fixtures/bitnet-cpp/tiny.i2_s.gguf");
const GREEDY: &[u8] = include_bytes!("../../../../assets/fixtures/bitnet-cpp/greedy-32.bin");
const PPL_TEXT: &str = include_str!("../../../../assets/fixtures/bitnet-cpp/ppl.txt");
const PROMPT: &str = "The kernel runs the model.";

fn shared(bytes: Vec<u8>) -> Shared {
    Arc::new(bytes)
}

fn fixture() -> Model {
    load::load(shared(I2S.to_vec())).expect("the fixture loads")
}

fn scalar() -> Exec<'static> {
    Exec { backend: Backend::Scalar, par: &Single, simd: false, reference: false }
}

fn greedy_run(m: &Model, prompt: &[u32], n: usize, ex: &Exec) -> Vec<u32> {
    let mut cache = Cache::new(&m.config, 256);
    let mut logits = m.forward(prompt, &mut cache, ex, Logits::Last).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = sample::greedy(&logits);
        out.push(t);
        logits = m.forward(&[t], &mut cache, ex, Logits::Last).unwrap();
    }
    out
}

#[test]
fn the_fixture_prompt_tokenises_as_llama_cpp_did() {
    let m = fixture();
    let tok = m.tokenizer.as_ref().unwrap();
    assert_eq!(tok.encode(PROMPT, true).unwrap(), [1, 313, 278, 403, 351, 414, 294, 282, 397, 431]);
    assert_eq!(tok.decode(&tok.encode(PROMPT, false).unwrap()), b" The kernel runs the model.");
}

#[test]
fn greedy_decoding_prints_exactly_what_bitnet_cpp_printed() {
    let m = fixture();
    let tok = m.tokenizer.as_ref().unwrap();
    let prompt = tok.encode(PROMPT, true).unwrap();
    let out = greedy_run(&m, &prompt, 32, &Exec::best(&Single));
    // llama-cli ends its output with two newlines of its own.
    assert_eq!(tok.decode(&out), &GREEDY[..GREEDY.len() - 2], "tokens {out:?}");
}

/// Mean negative log-likelihood as llama-perplexity computes it: chunks of `ctx` tokens, the
/// first replaced by BOS, scoring each position from `ctx/2` on by the next token.
fn mean_nll(m: &Model, ex: &Exec, ctx: usize) -> f64 {
    let tok = m.tokenizer.as_ref().unwrap();
    let tokens = tok.encode(PPL_TEXT, true).unwrap();
    let (mut nll, mut count) = (0.0f64, 0usize);
    for chunk in tokens.chunks_exact(ctx) {
        let mut input = chunk.to_vec();
        input[0] = tok.bos.unwrap();
        let mut cache = Cache::new(&m.config, ctx);
        let logits = m.forward(&input, &mut cache, ex, Logits::All).unwrap();
        let v = m.config.vocab;
        for j in ctx / 2..ctx - 1 {
            let row = &logits[j * v..(j + 1) * v];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
            nll += -(row[input[j + 1] as usize] as f64 - max - sum.ln());
            count += 1;
        }
    }
    nll / count as f64
}

#[test]
fn perplexity_matches_llama_perplexity_within_half_a_percent() {
    let m = fixture();
    let nll = mean_nll(&m, &Exec::best(&Single), 128);
    // llama-perplexity: PPL 19204246527745040384 → ln = 44.40 nats per token.
    let want = libm::log(19_204_246_527_745_040_384.0);
    assert!((nll - want).abs() / want < 0.005, "mean NLL {nll} vs {want}");
}

#[test]
fn every_backend_gives_the_scalar_kernels_bits_for_the_whole_model() {
    let m = fixture();
    // Long enough for every GEMM path: 40 rows run the AMX tiles where the CPU has them (16+),
    // the VNNI/AVX2 tiles in groups of four and the rest one by one.
    let mut prompt = vec![1u32, 313, 278, 403, 351];
    prompt.extend((0..35).map(|i| (i * 7919 + 11) % m.config.vocab as u32));
    let mut c1 = Cache::new(&m.config, 48);
    let mut c2 = Cache::new(&m.config, 48);
    let a = m.forward(&prompt, &mut c1, &scalar(), Logits::All).unwrap();
    let b = m.forward(&prompt, &mut c2, &Exec::best(&Single), Logits::All).unwrap();
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    // And on two threads.
    #[cfg(not(target_arch = "wasm32"))]
    {
        let pool = crate::bitnet::pool::Pool::new(2).unwrap();
        let mut c3 = Cache::new(&m.config, 48);
        let c = m.forward(&prompt, &mut c3, &Exec::best(&pool), Logits::All).unwrap();
        assert!(a.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

/// The F16 cache (llama.cpp's cache type) holds the values the forward pass rounded to F16
/// anyway: a prompt, then token after token, gives an f32 cache's bits with half its bytes.
#[test]
fn an_f16_cache_gives_an_f32_caches_bits_in_half_the_bytes() {
    let m = fixture();
    let mut prompt = vec![1u32, 313, 278, 403, 351];
    prompt.extend((0..15).map(|i| (i * 7919 + 11) % m.config.vocab as u32));
    #[cfg(not(target_arch = "wasm32"))]
    let pool = crate::bitnet::pool::Pool::new(2).unwrap();
    #[cfg(not(target_arch = "wasm32"))]
    let execs = [scalar(), Exec::best(&Single), Exec::best(&pool)];
    #[cfg(target_arch = "wasm32")]
    let execs = [scalar(), Exec::best(&Single)];
    for ex in &execs {
        let (mut half, mut full) = (Cache::new(&m.config, 32), Cache::f32(&m.config, 32));
        assert!(half.is_f16() && !full.is_f16());
        assert_eq!(2 * half.bytes(), full.bytes());
        let mut a = m.forward(&prompt, &mut half, ex, Logits::All).unwrap();
        let b = m.forward(&prompt, &mut full, ex, Logits::All).unwrap();
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "the prompt, {:?}", ex.backend);
        for step in 0..8 {
            let t = sample::greedy(&a[a.len() - m.config.vocab..]);
            a = m.forward(&[t], &mut half, ex, Logits::Last).unwrap();
            let b = m.forward(&[t], &mut full, ex, Logits::Last).unwrap();
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "step {step}, {:?}", ex.backend);
        }
    }
    // The reference rounds nothing, so an F16 cache would: it is refused by name.
    let reference = Exec { reference: true, ..scalar() };
    let err = m.forward(&prompt, &mut Cache::new(&m.config, 32), &reference, Logits::Last).unwrap_err();
    assert!(matches!(err, ModelError::ReferenceCache) && err.to_string().contains("Cache::f32"), "{err}");
}

/// The fixture's ternary weights repacked in `quant`.
fn repacked(m: &Model, quant: Quant) -> Model {
    let mut r = m.clone();
    for b in &mut r.blocks {
        for l in [
            &mut b.attn.q,
            &mut b.attn.k,
            &mut b.attn.v,
            &mut b.attn.o,
            &mut b.ffn.gate,
            &mut b.ffn.up,
            &mut b.ffn.down,
        ] {
            *l = Linear::pack(&l.unpack(), quant).unwrap();
        }
    }
    r
}

#[test]
fn i2_s_tl1_and_tl2_run_the_same_model_to_the_same_bits() {
    let m = fixture();
    let prompt = [1, 313, 278, 403, 351, 414, 294];
    let run = |m: &Model| {
        let mut c = Cache::new(&m.config, 16);
        m.forward(&prompt, &mut c, &Exec::best(&Single), Logits::All).unwrap()
    };
    let want = run(&m);
    for q in [Quant::Tl1, Quant::Tl2] {
        let got = run(&repacked(&m, q));
        assert!(want.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits()), "{q:?}");
    }
}

#[test]
fn the_model_follows_its_f32_reference_within_the_stated_bound() {
    let m = load::load(shared(dummy_file(&tiny_config(), Quant::I2s, GgmlType::F16))).unwrap();
    let tokens = m.tokenizer.as_ref().unwrap().encode(PPL_TEXT, true).unwrap();
    let prompt = &tokens[..96];
    let reference = Exec { reference: true, ..scalar() };
    let (mut c1, mut c2) = (Cache::new(&m.config, 96), Cache::f32(&m.config, 96));
    let a = m.forward(prompt, &mut c1, &Exec::best(&Single), Logits::All).unwrap();
    let b = m.forward(prompt, &mut c2, &reference, Logits::All).unwrap();
    let v = m.config.vocab;
    // The kernel path quantises every linear layer's input to int8 (a relative error of up to
    // 1/254 per value) and rounds K, V, q and the attention weights to F16; a random-weight model
    // amplifies such differences wherever two attention scores or FFN paths nearly tie, so the
    // bound is over the 96 positions of a text: per position, the RMS logit difference relative
    // to the spread of the logits; its median below 5 %; the top token the same at 80 % of the
    // positions, and the reference's top token among the kernel's top 5 at 95 %. (Measured:
    // median 2.8 %, 83/96 and 94/96; the fixture's own, sharper model gives 27 %, 61/96, 86/96.)
    let (mut ratios, mut top1, mut top5) = (Vec::new(), 0, 0);
    for (x, y) in a.chunks_exact(v).zip(b.chunks_exact(v)) {
        let rms_diff = (x.iter().zip(y).map(|(p, q)| ((p - q) as f64).powi(2)).sum::<f64>() / v as f64).sqrt();
        let mean = y.iter().map(|&q| q as f64).sum::<f64>() / v as f64;
        let spread = (y.iter().map(|&q| (q as f64 - mean).powi(2)).sum::<f64>() / v as f64).sqrt();
        ratios.push(rms_diff / spread);
        let want = sample::greedy(y);
        top1 += (sample::greedy(x) == want) as usize;
        top5 += (x.iter().filter(|&&l| l > x[want as usize]).count() < 5) as usize;
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = ratios[n / 2];
    assert!(median < 0.05, "median {median}");
    assert!(top1 * 100 >= 80 * n && top5 * 100 >= 95 * n, "top-1 {top1}/{n}, top-5 {top5}/{n}");
}

#[test]
fn each_linear_layer_equals_the_plain_integer_dot_products_in_every_format() {
    let m = fixture();
    let mut rng = crate::bitnet::random::Rng::new(7);
    for b in &m.blocks[..1] {
        for l in [&b.attn.q, &b.attn.k, &b.ffn.up, &b.ffn.down] {
            let t = l.unpack();
            for q in Quant::ALL {
                let packed = Linear::pack(&t, q).unwrap();
                for n in [1, 3] {
                    let xs = rng.f32s(n * t.cols, 3.0);
                    // Independent reference: per row, int8 activations and Σ w·q in i64.
                    let mut want = vec![0.0f32; n * t.rows];
                    for (x, o) in xs.chunks_exact(t.cols).zip(want.chunks_exact_mut(t.rows)) {
                        let a = quantize_activations(x, Rounding::HalfEven).unwrap();
                        for (r, y) in o.iter_mut().enumerate() {
                            let acc: i64 = t.row(r).iter().zip(&a.q).map(|(&w, &v)| w as i64 * v as i64).sum();
                            *y = crate::bitnet::dequantize(acc as i32, a.scale, t.scale);
                        }
                    }
                    for backend in Backend::available() {
                        let mut got = vec![0.0f32; n * t.rows];
                        packed.forward(&xs, backend, &Single, &mut got).unwrap();
                        assert_eq!(got, want, "{q:?} on {backend:?}, {n} rows");
                    }
                }
            }
        }
    }
}

fn tiny_config() -> Config {
    Config {
        vocab: 300,
        dim: 256,
        ffn: 384,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        rope_base: 10000.0,
        eps: 1e-5,
        context: 64,
    }
}

fn dummy_file(c: &Config, quant: Quant, embed: GgmlType) -> Vec<u8> {
    let meta = dummy::metadata(c, "test", quant);
    let tensors = write::tensors(c, quant, embed, false);
    write::to_bytes(&meta, &tensors, |name, kind| Ok(dummy::values(5, name, kind))).unwrap()
}

#[test]
fn written_models_load_back_with_the_same_weights_in_every_format() {
    let c = tiny_config();
    for quant in Quant::ALL {
        let bytes = dummy_file(&c, quant, GgmlType::F16);
        let m = load::load(shared(bytes)).unwrap();
        assert_eq!(m.config, c);
        for (i, b) in m.blocks.iter().enumerate() {
            let name = load::block_tensor(i, "ffn_down");
            let Values::Ternary(want) = dummy::values(5, &name, &Kind::Linear { m: c.dim, k: c.ffn, quant }) else {
                panic!()
            };
            assert_eq!(b.ffn.down.unpack(), want, "{quant:?}");
            assert_eq!(b.ffn.down.quant(), quant);
            assert!(b.ffn.down.packed().is_shared(), "weights are read in place, not copied");
        }
        // GQA (2 KV heads for 4) and a short prompt run.
        let tok = m.tokenizer.as_ref().unwrap();
        let ids = tok.encode("hello world", true).unwrap();
        assert_eq!(tok.decode(&ids), b" hello world");
        let mut cache = Cache::new(&m.config, 32);
        let l = m.forward(&ids, &mut cache, &Exec::best(&Single), Logits::Last).unwrap();
        assert!(l.iter().all(|v| v.is_finite()) && l.len() == c.vocab);
    }
}

#[test]
fn converting_bitnet_cpps_f32_model_gives_its_i2_s_codes_and_scales() {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let f32_bytes = include_bytes!("../../../../assets/fixtures/bitnet-cpp/tiny.f32.gguf");
        let src = crate::gguf::Gguf::parse(f32_bytes).unwrap();
        let want = crate::gguf::Gguf::parse(I2S).unwrap();
        let mut checked = 0;
        for t in src.tensors.iter().filter(|t| t.dims.len() == 2 && t.name != "token_embd.weight") {
            let w = src.dequantize(f32_bytes, t).unwrap();
            let (k, m) = (t.dims[0] as usize, t.dims[1] as usize);
            let tern = convert::ternary(m, k, &w).unwrap();
            let (bytes, _) = write::encode_linear(&tern, Quant::I2s).unwrap();
            let o = want.tensor(&t.name).unwrap();
            // Codes and the scale (the trailer's first f32); the rest of bitnet.cpp's trailer is
            // uninitialised memory.
            assert_eq!(&bytes[..m * k / 4 + 4], &I2S[o.offset..o.offset + m * k / 4 + 4], "{}", t.name);
            checked += 1;
        }
        assert_eq!(checked, 14);
    }
}

#[test]
fn bad_files_are_refused_naming_what_is_wrong() {
    let c = tiny_config();
    let good = dummy_file(&c, Quant::I2s, GgmlType::F32);
    // Another architecture.
    let mut meta = dummy::metadata(&c, "x", Quant::I2s);
    meta[0].1 = crate::gguf::Value::String("llama".into());
    let tensors = write::tensors(&c, Quant::I2s, GgmlType::F32, false);
    let other = write::to_bytes(&meta, &tensors, |n, k| Ok(dummy::values(5, n, k))).unwrap();
    let e = load::load(shared(other)).unwrap_err().to_string();
    assert!(e.contains("general.architecture") && e.contains("llama"), "{e}");
    // Truncated: every cut is an error, never a panic.
    for cut in [100, good.len() / 2, good.len() - 40] {
        assert!(load::load(shared(good[..cut].to_vec())).is_err());
    }
    // A TL2 matrix whose K leaves a remainder the kernels cannot take (K = 200).
    let bad = Config { dim: 200, heads: 4, kv_heads: 4, ..c.clone() };
    let tensors = write::tensors(&bad, Quant::I2s, GgmlType::F32, false);
    let e = write::to_bytes(&dummy::metadata(&bad, "x", Quant::I2s), &tensors, |n, k| Ok(dummy::values(5, n, k)));
    assert!(e.unwrap_err().to_string().contains("multiple of 128"));
    let e = Linear::pack(&TernaryMatrix::new(256, 200, vec![0; 256 * 200], 1.0).unwrap(), Quant::Tl2).unwrap_err();
    assert!(e.to_string().contains("TL2"), "{e}");
    // The kernels take K = 128, bitnet.cpp's TL2 file size formula does not.
    let e =
        write::encode_linear(&TernaryMatrix::new(64, 128, vec![0; 64 * 128], 1.0).unwrap(), Quant::Tl2).unwrap_err();
    assert!(e.to_string().contains("K ≥ 256"), "{e}");
    // A token id beyond the vocabulary, and a prompt beyond the context.
    let m = load::load(shared(good)).unwrap();
    let mut cache = Cache::new(&m.config, 4);
    let e = m.forward(&[999], &mut cache, &scalar(), Logits::Last).unwrap_err();
    assert_eq!(e, ModelError::Token { id: 999, vocab: 300 });
    let e = m.forward(&[1; 5], &mut cache, &scalar(), Logits::Last).unwrap_err();
    assert_eq!(e, ModelError::Context { pos: 5, context: 4 });
    assert_eq!(m.forward(&[], &mut cache, &scalar(), Logits::Last).unwrap_err(), ModelError::NoTokens);
}

#[test]
fn the_simd_output_layer_gives_the_scalar_bits() {
    // F16 weights over the whole range (subnormals included), F32 weights, and a width that
    // leaves a tail after the 32-lane blocks.
    let mut rng = crate::bitnet::random::Rng::new(11);
    for (ty, cols) in [(GgmlType::F16, 96), (GgmlType::F16, 100), (GgmlType::F32, 72)] {
        let rows = 40;
        let bytes: Vec<u8> = match ty {
            GgmlType::F16 => (0..rows * cols)
                .flat_map(|_| {
                    // Any finite half: exponent 0..=30.
                    let h = (rng.next_u64() as u16) & 0xfbff;
                    h.to_le_bytes()
                })
                .collect(),
            _ => rng.f32s(rows * cols, 4.0).iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let t = table::Table::new("t", rows, cols, ty, bytes.into()).unwrap();
        let x = rng.f32s(2 * cols, 2.0);
        let (mut a, mut b) = (vec![0.0; 2 * rows], vec![0.0; 2 * rows]);
        t.logits(&x, false, &Single, &mut a).unwrap();
        t.logits(&x, table::simd_available(), &Single, &mut b).unwrap();
        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "{ty:?} × {cols}");
        // And each is the plain 32-lane sum of the decoded weights.
        let mut w = vec![0.0f32; cols];
        t.row(3, &mut w);
        let xr: Vec<f32> = x[..cols].iter().map(|&v| crate::gguf::f16_to_f32(crate::gguf::f32_to_f16(v))).collect();
        let xr = if ty == GgmlType::F16 { xr } else { x[..cols].to_vec() };
        let mut lanes = [0.0f32; 32];
        for i in 0..cols {
            lanes[i % 32] += w[i] * xr[i];
        }
        let mut v = [0.0f32; 8];
        for (i, o) in v.iter_mut().enumerate() {
            *o = (lanes[i] + lanes[8 + i]) + (lanes[16 + i] + lanes[24 + i]);
        }
        let want = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        assert_eq!(a[3].to_bits(), want.to_bits());
    }
}

#[test]
fn matrices_sharing_an_input_give_in_one_pass_what_each_gives_alone() {
    let mut rng = crate::bitnet::random::Rng::new(3);
    // Different heights (as q and a GQA k, or gate and up), the same K.
    let ts = [rng.ternary(256, 256), rng.ternary(128, 256), rng.ternary(512, 256)];
    for quant in Quant::ALL {
        let ws: Vec<Linear> = ts.iter().map(|t| Linear::pack(t, quant).unwrap()).collect();
        // And a list that mixes formats, which runs matrix by matrix.
        let other = Linear::pack(&ts[1], if quant == Quant::I2s { Quant::Tl1 } else { Quant::I2s }).unwrap();
        for list in [vec![&ws[0], &ws[1], &ws[2]], vec![&ws[0], &other]] {
            for n in [1, 3, 37] {
                let xs = rng.f32s(n * 256, 2.0);
                let mut outs: Vec<Vec<f32>> = list.iter().map(|w| vec![0.0; n * w.shape().0]).collect();
                let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                Linear::forward_many(&list, &xs, Backend::best(), &Single, &mut refs).unwrap();
                for (w, got) in list.iter().zip(&outs) {
                    let mut want = vec![0.0; n * w.shape().0];
                    w.forward(&xs, Backend::Scalar, &Single, &mut want).unwrap();
                    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{quant:?}, {n} rows");
                }
            }
        }
    }
}

/// The gate and up projections fused with their element-wise product, where the I2_S block
/// GEMM runs, give the bits of the two projections and the product taken apart; elsewhere the
/// call declines. (On one thread and on two.)
#[test]
fn the_fused_gate_and_up_projections_give_the_unfused_bits() {
    let mut rng = crate::bitnet::random::Rng::new(5);
    let (gate, up) = (rng.ternary(256, 256), rng.ternary(256, 256));
    let glu = |g: &mut [f32], u: &[f32]| g.iter_mut().zip(u).for_each(|(g, u)| *g = *g * 0.5 + u);
    #[cfg(not(target_arch = "wasm32"))]
    let pool = crate::bitnet::pool::Pool::new(2).unwrap();
    #[cfg(not(target_arch = "wasm32"))]
    let pars: [&dyn Parallel; 2] = [&Single, &pool];
    #[cfg(target_arch = "wasm32")]
    let pars: [&dyn Parallel; 1] = [&Single];
    for quant in Quant::ALL {
        let (g, u) = (Linear::pack(&gate, quant).unwrap(), Linear::pack(&up, quant).unwrap());
        for n in [1, 8, 37] {
            let xs = rng.f32s(n * 256, 2.0);
            let (mut want, mut ups) = (vec![0.0; n * 256], vec![0.0; n * 256]);
            g.forward(&xs, Backend::Scalar, &Single, &mut want).unwrap();
            u.forward(&xs, Backend::Scalar, &Single, &mut ups).unwrap();
            glu(&mut want, &ups);
            for (par, backend) in pars.into_iter().flat_map(|p| Backend::available().into_iter().map(move |b| (p, b))) {
                let mut got = vec![0.0; n * 256];
                let fused = Linear::forward_gated(&g, &u, &xs, backend, par, &mut got, &glu).unwrap();
                let expected = cfg!(all(target_arch = "x86_64", feature = "std"))
                    && quant == Quant::I2s
                    && n >= 8
                    && matches!(backend, Backend::Avx512 | Backend::Avx2);
                assert_eq!(fused, expected, "{quant:?} {backend:?}, {n} rows");
                if fused {
                    let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{quant:?} {backend:?}, {n} rows");
                }
            }
        }
    }
}

/// A Q8_0 / Q6_K output layer: its logits follow the f64 dot products of its decoded rows with
/// the activations (to the activation quantisation's step), on one thread and on two alike, and
/// its rows decode for the embedding lookup.
#[test]
fn quantised_output_layers_give_the_decoded_rows_dot_products() {
    let mut rng = crate::bitnet::random::Rng::new(12);
    for ty in [GgmlType::Q8_0, GgmlType::Q6_K] {
        let (rows, cols) = (37, 512);
        let w = rng.f32s(rows * cols, 1.0);
        let bytes = write::encode_table(&w, ty);
        let t = table::Table::new("t", rows, cols, ty, bytes.clone().into()).unwrap();
        let x = rng.f32s(2 * cols, 2.0);
        let mut a = vec![0.0; 2 * rows];
        t.logits(&x, true, &Single, &mut a).unwrap();
        let decoded = crate::gguf::dequantize(ty, &bytes).unwrap();
        let mut row = vec![0.0f32; cols];
        for (j, x) in x.chunks_exact(cols).enumerate() {
            let xmax = x.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
            for r in 0..rows {
                t.row(r, &mut row);
                assert_eq!(row, decoded[r * cols..][..cols], "{ty:?} row {r}");
                let want: f64 = row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum();
                let bound: f64 = row.iter().map(|a| a.abs() as f64).sum::<f64>() * xmax / 127.0;
                let got = a[j * rows + r] as f64;
                assert!((got - want).abs() <= bound, "{ty:?} ({j}, {r}): {got} vs {want} ± {bound}");
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let pool = crate::bitnet::pool::Pool::new(2).unwrap();
            let mut b = vec![0.0; 2 * rows];
            t.logits(&x, true, &pool, &mut b).unwrap();
            assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "{ty:?} on two threads");
        }
    }
    let err = table::Table::new("t", 2, 100, GgmlType::Q8_0, vec![0u8; 2 * 4 * 34].into()).unwrap_err();
    assert!(format!("{err}").contains("blocks of 32"), "{err}");
}
