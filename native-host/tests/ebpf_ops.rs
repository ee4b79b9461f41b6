//! The BPF operators, run in this machine's kernel, against the golden model
//! (`kernels_wasm::qwen3::fixed`): bit-identical outputs. Skipped, loudly, only where the
//! capability probe (itself checked against /proc by the probe tests) says bpf() is refused.

use kernels_wasm::bitnet::random::Rng;
use kernels_wasm::qwen3::fixed;
use native_host::ebpf::matvec::Matvec;

fn bpf_available() -> bool {
    let probe = native_host::probe::ebpf();
    if !probe.available {
        eprintln!("SKIPPED: this host cannot load BPF programs: {}", probe.detail);
    }
    probe.available
}

/// Q16 activations in ±8 and Q24 weights in ±0.5: the ranges a real layer sees.
fn data(rng: &mut Rng, rows: usize, cols: usize) -> (Vec<i32>, Vec<i32>) {
    let x = (0..cols).map(|_| (rng.next_u64() % (16 << 16)) as i32 - (8 << 16)).collect();
    let w = (0..rows * cols).map(|_| (rng.next_u64() % (1 << 24)) as i32 - (1 << 23)).collect();
    (x, w)
}

#[test]
fn matvec_in_the_kernel_equals_the_golden_model() {
    if !bpf_available() {
        return;
    }
    let mut rng = Rng::new(5);
    for (rows, cols) in [(1, 2), (7, 64), (300, 1024), (1024, 3072)] {
        let mut prog = Matvec::load(rows, cols).unwrap_or_else(|e| panic!("{rows}x{cols}: {e}"));
        assert!(prog.verified_insns.is_some_and(|n| n > 0), "verifier statistics");
        let (x, w) = data(&mut rng, rows, cols);
        prog.set_weights(&w).unwrap();
        let mut expected = vec![0; rows];
        let argmax = fixed::matvec(&w, &x, &mut expected);
        for threads in [1, 2] {
            let mut y = vec![0; rows];
            let stats = prog.run(&x, &mut y, threads).unwrap();
            assert_eq!(y, expected, "{rows}x{cols} on {threads} threads");
            assert_eq!(stats.argmax, argmax, "{rows}x{cols} argmax");
            assert_eq!(stats.calls, threads.min(rows));
        }
    }
}

#[test]
fn ties_keep_the_lowest_row_across_threads() {
    if !bpf_available() {
        return;
    }
    let (rows, cols) = (10, 4);
    let mut prog = Matvec::load(rows, cols).unwrap();
    // Rows 3 and 7 tie for the maximum; 7 is in the second thread's share.
    let mut w = vec![0; rows * cols];
    for r in [3, 7] {
        w[r * cols] = 1 << 24;
    }
    prog.set_weights(&w).unwrap();
    let mut y = vec![0; rows];
    let stats = prog.run(&[5 << 16, 0, 0, 0], &mut y, 2).unwrap();
    assert_eq!((stats.argmax, y[3], y[7]), (3, 5 << 16, 5 << 16));
}

#[test]
fn bad_shapes_are_refused_with_their_names() {
    assert!(Matvec::load(4, 3).is_err()); // odd cols
    if !bpf_available() {
        return;
    }
    let mut prog = Matvec::load(4, 8).unwrap();
    assert!(prog.set_weights(&[0; 31]).unwrap_err().to_string().contains("weights"));
    let err = prog.run(&[0; 7], &mut [0; 4], 1).unwrap_err();
    assert!(err.to_string().contains("x: expected 8"), "{err}");
}

mod vector_ops {
    use super::*;
    use kernels_wasm::qwen3::model::rope_tables;
    use native_host::ebpf::ops::{At, KvShape, Ops, Qkv};

    fn q16s(rng: &mut Rng, n: usize, amp: i64) -> Vec<i32> {
        (0..n).map(|_| ((rng.next_u64() % (2 * amp as u64 + 1)) as i64 - amp) as i32).collect()
    }

    fn ops(kv: KvShape) -> Option<Ops> {
        bpf_available().then(|| Ops::load(kv).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Qwen3's head_dim and ε, and llama's (SmolLM2).
    const KV: [(KvShape, f64); 2] = [
        (KvShape { positions: 9, layers: 2, kv_heads: 2, head_dim: 128 }, 1e-6),
        (KvShape { positions: 9, layers: 2, kv_heads: 3, head_dim: 64 }, 1e-5),
    ];

    #[test]
    fn norms_rope_silu_and_add_equal_the_golden_model() {
        for (kv, eps) in KV {
            let Some(mut ops) = ops(kv) else { return };
            ops.eps_q32 = fixed::eps_q32(eps) as u32;
            assert!(ops.verifier_stats().iter().all(|(_, n)| n.is_some_and(|n| n > 0)));
            vector_ops_equal_the_golden_model(&mut ops, eps);
        }
    }

    fn vector_ops_equal_the_golden_model(ops: &mut Ops, eps: f64) {
        let mut rng = Rng::new(8);
        let hd = ops.kv.head_dim;
        for (n, segs) in [(1024, 1), (3072, 1), (2048, 16), (1024, 8), (6, 3), (576, 9)] {
            let x = q16s(&mut rng, n, 12 << 16);
            let w: Vec<i32> = q16s(&mut rng, n / segs, 1 << 20).iter().map(|v| v + (1 << 20)).collect();
            let (mut golden, mut kernel) = (x.clone(), x.clone());
            fixed::rms_norm_segments(&mut golden, &w, segs, fixed::eps_q32(eps));
            ops.rms_norm(&mut kernel, &w, segs).unwrap();
            assert_eq!(kernel, golden, "rms_norm n={n} segments={segs} eps={eps}");
        }
        let (cos, sin) = rope_tables(1e6, hd, 5);
        let x = q16s(&mut rng, 16 * hd, 8 << 16);
        let (mut golden, mut kernel) = (x.clone(), x);
        for head in golden.chunks_exact_mut(hd) {
            fixed::rope(head, &cos, &sin);
        }
        ops.rope(&mut kernel, &cos, &sin).unwrap();
        assert_eq!(kernel, golden, "rope head_dim {hd}");
        for n in [1, 3072] {
            let (a, b) = (q16s(&mut rng, n, 20 << 16), q16s(&mut rng, n, 4 << 16));
            let (mut golden, mut kernel) = (a.clone(), a.clone());
            fixed::silu_mul(&mut golden, &b);
            ops.silu_mul(&mut kernel, &b).unwrap();
            assert_eq!(kernel, golden, "silu_mul n={n}");
            let (mut golden, mut kernel) = (a.clone(), a);
            fixed::add(&mut golden, &b);
            ops.add(&mut kernel, &b).unwrap();
            assert_eq!(kernel, golden, "add n={n}");
        }
        // Wrapping, as C's s32 addition on two's complement.
        let mut edge = vec![i32::MAX];
        ops.add(&mut edge, &[1]).unwrap();
        assert_eq!(edge, [i32::MIN]);
    }

    #[test]
    fn attention_over_the_cache_equals_the_golden_model() {
        for (kv, _) in KV {
            let Some(mut ops) = ops(kv) else { return };
            attention_equals_the_golden_model(&mut ops);
        }
    }

    fn attention_equals_the_golden_model(ops: &mut Ops) {
        let kv = ops.kv;
        let (mut rng, hd) = (Rng::new(9), kv.head_dim);
        let heads = 2 * kv.kv_heads; // GQA: query heads 0, 1 read KV head 0; 2, 3 read KV head 1 …
        let shape = fixed::Heads { heads, kv_heads: kv.kv_heads, dim: hd };
        let kvn = kv.kv_heads * hd;
        // The golden model's own cache: [layer][pos] → (k, v).
        let mut cache: Vec<Vec<(Vec<i32>, Vec<i32>)>> = vec![Vec::new(); kv.layers];
        for pos in 0..kv.positions {
            for (layer, c) in cache.iter_mut().enumerate() {
                let q = q16s(&mut rng, heads * hd, 2 << 16);
                let (k, v) = (q16s(&mut rng, kvn, 2 << 16), q16s(&mut rng, kvn, 6 << 16));
                c.push((k.clone(), v.clone()));
                let mut expected = vec![0; heads * hd];
                let c = &*c;
                let slice = |p: usize, h: usize, which: usize| &[&c[p].0, &c[p].1][which][h * hd..(h + 1) * hd];
                fixed::attention(&q, shape, pos + 1, |p, h| slice(p, h, 0), |p, h| slice(p, h, 1), &mut expected);
                let mut out = vec![0; heads * hd];
                ops.attention(At { layer, pos }, heads, Qkv { q: &q, k: &k, v: &v }, &mut out).unwrap();
                assert_eq!(out, expected, "head_dim {hd} layer {layer} position {pos}");
            }
        }
        // A position beyond the map's context is refused, naming it.
        let (q, k) = (vec![0; heads * hd], vec![0; kvn]);
        let qkv = Qkv { q: &q, k: &k, v: &k };
        let err = ops.attention(At { layer: 0, pos: kv.positions }, heads, qkv, &mut q.clone()).unwrap_err();
        assert!(err.to_string().contains("context"), "{err}");
    }
}

#[test]
fn the_tiny_model_in_the_kernel_equals_the_golden_model_token_by_token() {
    use kernels_wasm::qwen3::model::{Cache, Config, Model};
    use native_host::ebpf::forward::BpfModel;
    if !bpf_available() {
        return;
    }
    // Qwen3, llama (head_dim 64, no QK-norm, ε 1e-5) and qwen2 (q/k/v biases).
    for (arch, c) in Config::TINY_FAMILY {
        let model = Model::from_float(c, &Model::random_float(c, 11)).unwrap();
        let tokens = [5usize, 999, 0, 42, 7, 7];
        for threads in [1, 2] {
            let mut bpf = BpfModel::load(&model, tokens.len(), threads).unwrap();
            let mut cache = Cache::default();
            for (pos, &t) in tokens.iter().enumerate() {
                let golden = model.forward(t, pos, &mut cache);
                let kernel = bpf.forward(t, pos).unwrap();
                assert_eq!(kernel.logits, golden.logits, "{arch} position {pos}, {threads} threads");
                assert_eq!(kernel.argmax, golden.argmax);
            }
            assert!(bpf.forward(c.vocab, 0).is_err());
            assert!(bpf.forward(1, tokens.len()).unwrap_err().to_string().contains("context"));
        }
    }
}

/// The research storages (FACTS §1's variants): BF16 + table and INT4 groups, each bit-identical
/// to the golden model of the weights it stores, on every architecture of the family.
#[test]
fn every_weight_storage_equals_its_golden_model() {
    use kernels_wasm::qwen3::model::{Cache, Config, Model};
    use kernels_wasm::qwen3::weights::WeightFormat;
    use native_host::ebpf::forward::BpfModel;
    if !bpf_available() {
        return;
    }
    for (arch, c) in Config::TINY_FAMILY {
        let model = Model::from_float(c, &Model::random_float(c, 12)).unwrap();
        for format in [WeightFormat::Bf16Table, WeightFormat::Int4G128] {
            let golden = model.with_weights(format);
            let mut bpf = BpfModel::load_as(&model, 4, 2, format).unwrap_or_else(|e| panic!("{arch} {format:?}: {e}"));
            let mut cache = Cache::default();
            for (pos, t) in [5usize, 999, 0, 42].into_iter().enumerate() {
                let want = golden.forward(t, pos, &mut cache);
                assert_eq!(bpf.forward(t, pos).unwrap().logits, want.logits, "{arch} {format:?} position {pos}");
            }
        }
    }
}
