//! The Qwen3 forward pass with every multiply in the kernel: the golden model's steps
//! (`kernels_wasm::qwen3::model`) each as a BPF call. The matrices of all layers sharing an input
//! width are stacked in one matvec program's map (q|k|v, gate|up and the LM head by hidden; o by
//! heads·128; down by intermediate), so nothing is copied per token; the host only moves vectors
//! between calls and computes RoPE's cos/sin.
//!
//! Calls are fused so a layer takes 9 (2 threads): q|k|v with the input RMSNorm (and qwen2's
//! biases, as the residual operand); attention with QK-norm (Qwen3), RoPE and the cache write; o with the residual add; gate|up (rows interleaved in pairs)
//! with the post-attention RMSNorm and SiLU·up; down with the residual add.

use super::matvec::{Fuse, Matvec, SLOTS};
use super::ops::{At, KvShape, Ops, Prep, Qkv};
use super::EbpfError;
use kernels_wasm::protocol::ebpf::TraceSpan;
use kernels_wasm::qwen3::model::{rope_tables, Config, Model, Step};
use kernels_wasm::qwen3::weights::WeightFormat;
use std::sync::Arc;
use std::time::Instant;

struct LayerVectors {
    input_norm: Vec<i32>,
    /// Empty without QK-norm.
    q_norm: Vec<i32>,
    k_norm: Vec<i32>,
    post_norm: Vec<i32>,
    /// Empty without q/k/v biases.
    qkv_bias: Vec<i32>,
}

pub struct BpfModel {
    pub config: Config,
    embed: Vec<i32>,
    /// Per layer: the vectors the host hands the programs each token. Shared (`Arc`), so a token
    /// borrows them while `self`'s programs run without copying them.
    vectors: Vec<Arc<LayerVectors>>,
    final_norm: Arc<Vec<i32>>,
    by_hidden: Matvec,
    by_heads: Matvec,
    by_inter: Matvec,
    pub ops: Ops,
    /// BPF calls made by the matvec programs.
    pub matvec_calls: u64,
    pub threads: usize,
    /// When `Some`, every BPF call of the current token is recorded here (cleared per token).
    pub trace: Option<Vec<TraceSpan>>,
    token_start: Instant,
}

impl BpfModel {
    /// Loads every program and copies the weights into the kernel's maps; `positions` sizes the
    /// KV cache.
    pub fn load(m: &Model, positions: usize, threads: usize) -> Result<Self, EbpfError> {
        Self::load_as(m, positions, threads, WeightFormat::Q24)
    }

    /// [`Self::load`] with the matrices stored as `format`: the logits then equal
    /// `m.with_weights(format)`'s.
    pub fn load_as(m: &Model, positions: usize, threads: usize, format: WeightFormat) -> Result<Self, EbpfError> {
        let c = m.config;
        let per_layer = c.qkv_rows() + 2 * c.intermediate;
        let mut by_hidden = Matvec::load_as(c.layers * per_layer + c.vocab, c.hidden, format)?;
        let mut by_heads = Matvec::load_as(c.layers * c.hidden, c.q_rows(), format)?;
        let mut by_inter = Matvec::load_as(c.layers * c.hidden, c.intermediate, format)?;
        for (i, l) in m.layers.iter().enumerate() {
            by_hidden.set_rows(i * per_layer, &l.qkv)?;
            // gate|up interleaved (gate i, up i, …) so a GLU call's pairs are adjacent rows.
            let (gate, up) = l.gate_up.split_at(c.intermediate * c.hidden);
            let pairs: Vec<i32> =
                gate.chunks_exact(c.hidden).zip(up.chunks_exact(c.hidden)).flat_map(|(g, u)| [g, u].concat()).collect();
            by_hidden.set_rows(i * per_layer + c.qkv_rows(), &pairs)?;
            by_heads.set_rows(i * c.hidden, &l.o)?;
            by_inter.set_rows(i * c.hidden, &l.down)?;
        }
        by_hidden.set_rows(c.layers * per_layer, &m.lm_head)?;
        let mut ops = Ops::load(KvShape { positions, layers: c.layers, kv_heads: c.kv_heads, head_dim: c.head_dim })?;
        let eps = c.eps_q32() as u32;
        ops.eps_q32 = eps;
        for mv in [&mut by_hidden, &mut by_heads, &mut by_inter] {
            mv.eps_q32 = eps;
        }
        Ok(BpfModel {
            config: c,
            embed: m.embed.clone(),
            vectors: m
                .layers
                .iter()
                .map(|l| {
                    Arc::new(LayerVectors {
                        input_norm: l.input_norm.clone(),
                        q_norm: l.q_norm.clone(),
                        k_norm: l.k_norm.clone(),
                        post_norm: l.post_norm.clone(),
                        qkv_bias: l.qkv_bias.clone(),
                    })
                })
                .collect(),
            final_norm: Arc::new(m.final_norm.clone()),
            by_hidden,
            by_heads,
            by_inter,
            ops,
            matvec_calls: 0,
            threads: threads.clamp(1, SLOTS),
            trace: None,
            token_start: Instant::now(),
        })
    }

    fn record(&mut self, op: &str, layer: Option<usize>, rows: usize, kernel_ns: u64, start: Instant) {
        let base = self.token_start;
        if let Some(trace) = self.trace.as_mut() {
            trace.push(TraceSpan {
                program: if op == "attention" { "qwen3_attention" } else { "qwen3_matvec" }.into(),
                op: op.into(),
                layer: layer.map(|l| l as u32),
                rows: rows as u32,
                kernel_ns,
                start_ns: (start - base).as_nanos() as u64,
                end_ns: base.elapsed().as_nanos() as u64,
            });
        }
    }

    /// One fused matrix-vector call on the matrices of input width `which` (0 hidden, 1 heads·head_dim,
    /// 2 intermediate), traced as `op`.
    #[allow(clippy::too_many_arguments)]
    fn matvec(
        &mut self,
        op: &str,
        layer: Option<usize>,
        which: u8,
        x: &[i32],
        first: usize,
        y: &mut [i32],
        fuse: Fuse<'_>,
    ) -> Result<usize, EbpfError> {
        let start = Instant::now();
        let mv = match which {
            0 => &mut self.by_hidden,
            1 => &mut self.by_heads,
            _ => &mut self.by_inter,
        };
        let stats = mv.run_fused(x, first, y, self.threads, fuse)?;
        self.matvec_calls += stats.calls as u64;
        self.record(op, layer, y.len(), stats.kernel_ns, start);
        Ok(stats.argmax)
    }

    /// The verifier's instruction count of the matvec program (the same program in all three).
    pub fn matvec_verified_insns(&self) -> u32 {
        self.by_hidden.verified_insns.unwrap_or(0)
    }

    /// BPF calls so far, all programs.
    pub fn calls(&self) -> u64 {
        self.matvec_calls + self.ops.calls
    }

    /// The next-token logits after `token` at `pos`, every operator in the kernel.
    pub fn forward(&mut self, token: usize, pos: usize) -> Result<Step, EbpfError> {
        let c = self.config;
        if token >= c.vocab {
            return Err(EbpfError::Shape { what: "token id (vocabulary size)", expected: c.vocab, got: token });
        }
        let per_layer = c.qkv_rows() + 2 * c.intermediate;
        self.token_start = Instant::now();
        if let Some(t) = self.trace.as_mut() {
            t.clear();
        }
        let mut x = self.embed[token * c.hidden..(token + 1) * c.hidden].to_vec();
        let (cos, sin) = rope_tables(c.rope_theta, c.head_dim, pos);
        let mut qkv = vec![0; c.qkv_rows()];
        let mut attn = vec![0; c.q_rows()];
        let mut o = vec![0; c.hidden];
        let mut act = vec![0; c.intermediate];
        for layer in 0..c.layers {
            let lv = Arc::clone(&self.vectors[layer]);
            let bias = c.qkv_bias.then_some(&lv.qkv_bias[..]);
            let fuse = Fuse { prenorm: Some(&lv.input_norm), residual: bias, ..Fuse::default() };
            self.matvec("q|k|v + input norm", Some(layer), 0, &x, layer * per_layer, &mut qkv, fuse)?;
            let (q, kv) = qkv.split_at_mut(c.q_rows());
            let (k, v) = kv.split_at_mut(c.kv_rows());
            // QK-norm, RoPE, caching this token's K/V and attending: one call.
            let qk_norm = c.qk_norm.then_some((&lv.q_norm[..], &lv.k_norm[..]));
            let prep = Prep { qk_norm, cos: &cos, sin: &sin };
            let (start, kernel_before) = (Instant::now(), self.ops.kernel_ns);
            self.ops.attention_with(At { layer, pos }, c.heads, Qkv { q, k, v }, Some(prep), &mut attn)?;
            self.record("attention", Some(layer), c.q_rows(), self.ops.kernel_ns - kernel_before, start);
            let fuse = Fuse { residual: Some(&x), ..Fuse::default() };
            self.matvec("o + residual", Some(layer), 1, &attn, layer * c.hidden, &mut o, fuse)?;
            std::mem::swap(&mut x, &mut o);

            let fuse = Fuse { prenorm: Some(&lv.post_norm), glu: true, ..Fuse::default() };
            self.matvec(
                "gate|up + norm + SiLU·up",
                Some(layer),
                0,
                &x,
                layer * per_layer + c.qkv_rows(),
                &mut act,
                fuse,
            )?;
            let fuse = Fuse { residual: Some(&x), ..Fuse::default() };
            self.matvec("down + residual", Some(layer), 2, &act, layer * c.hidden, &mut o, fuse)?;
            std::mem::swap(&mut x, &mut o);
        }
        let mut logits = vec![0; c.vocab];
        let final_norm = Arc::clone(&self.final_norm);
        let fuse = Fuse { prenorm: Some(&final_norm), ..Fuse::default() };
        let argmax =
            self.matvec("vocab + final norm + argmax", None, 0, &x, c.layers * per_layer, &mut logits, fuse)?;
        Ok(Step { logits, argmax })
    }
}
