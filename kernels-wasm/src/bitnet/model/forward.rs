//! The forward pass of bitnet.cpp's `bitnet` architecture, one struct per layer, reading top to
//! bottom as its llama.cpp fork builds the graph:
//!
//! ```text
//! x = tok_embd[token]
//! per block:  h = x + W_o · SubNorm(Attention(RoPE(W_q · Norm(x)), RoPE(W_k · Norm(x)), W_v · Norm(x)))
//!             x = h + W_down · SubNorm(silu(W_gate · Norm(h)) ⊙ W_up · Norm(h))
//! logits = W_out · Norm(x)          (W_out = tok_embd when the file has no output.weight)
//! ```
//!
//! Where llama.cpp rounds to F16 this does too, so greedy decoding follows the same path: the KV
//! cache holds F16 values (llama.cpp's default cache type), and the query row and the softmax
//! weights are rounded to F16 before they meet it (ggml converts a mul_mat's F32 operand to the
//! F16 operand's type).
//!
//! The FFN gate is SiLU: bitnet.cpp's fixture (32 greedy tokens) is reproduced with SiLU and
//! not with the squared ReLU of the later BitNet b1.58 2B4T architecture; RoPE pairs `x[i]` with
//! `x[i + d/2]` likewise. [`Exec::reference`] turns every such rounding and the int8 activations
//! off: the f32 reference forward of the same ternary model. Transcendentals come from `libm`,
//! so native, wasm and `no_std` builds compute the same bits.

use super::attend::{self, Kv};
use super::cache::{sized, Layer, ReadRows, Rows};
pub use super::cache::{Cache, Scratch};
use super::config::Config;
use super::linear::Linear;
use super::par::{Disjoint, Parallel};
use super::table::{self, Table};
use super::tokenizer::Tokenizer;
use super::ModelError;
use crate::bitnet::backend::Backend;
use alloc::vec;
use alloc::vec::Vec;

/// How to run: which kernels, on which threads.
pub struct Exec<'a> {
    pub backend: Backend,
    pub par: &'a dyn Parallel,
    /// The AVX2 output layer (the scalar one gives the same bits).
    pub simd: bool,
    /// The f32 reference: unquantised activations, no F16 roundings.
    pub reference: bool,
}

impl<'a> Exec<'a> {
    /// The fastest kernels this machine has, on `par`.
    pub fn best(par: &'a dyn Parallel) -> Exec<'a> {
        Exec { backend: Backend::best(), par, simd: table::simd_available(), reference: false }
    }

    /// Rounds to F16 and back, unless this is the reference.
    fn round_half(&self, v: &mut [f32]) {
        if !self.reference {
            table::round_to_f16(v);
        }
    }

    fn linear(&self, w: &Linear, xs: &[f32], out: &mut [f32]) -> Result<(), crate::bitnet::BitnetError> {
        self.linears(&[w], xs, &mut [out])
    }

    /// `f` on every row (`width` values) of `xs`, rows shared out to the threads when there are
    /// several (each row computes alone, so the bits do not depend on the split).
    fn rows(&self, xs: &mut [f32], width: usize, f: &(dyn Fn(usize, &mut [f32]) + Sync)) {
        if xs.len() <= width {
            xs.chunks_exact_mut(width).enumerate().for_each(|(i, x)| f(i, x));
            return;
        }
        let work = |first: usize, chunk: &mut [f32]| {
            chunk.chunks_exact_mut(width).enumerate().for_each(|(i, x)| f(first + i, x));
            Ok(())
        };
        // The work never fails.
        let _ = self.par.split(xs, width, &work);
    }

    /// The idle workers may prefetch `ws`, which the next [`Self::linears`] reads (in this
    /// order), while the caller works alone ([`Parallel::warm`]).
    fn warm(&self, ws: &[&Linear]) {
        let spans: Vec<&[u8]> = ws.iter().map(|w| &**w.packed()).collect();
        self.warm_spans(&spans);
    }

    /// [`Self::warm`] for any bytes (the output layer's table); the reference needs no hints.
    fn warm_spans(&self, spans: &[&[u8]]) {
        if !self.reference {
            self.par.warm(spans);
        }
    }

    /// Matrices that read the same input, in one pass ([`Linear::forward_many`]).
    fn linears(&self, ws: &[&Linear], xs: &[f32], outs: &mut [&mut [f32]]) -> Result<(), crate::bitnet::BitnetError> {
        if self.reference {
            ws.iter().zip(outs.iter_mut()).for_each(|(w, o)| w.forward_f32(xs, o));
            Ok(())
        } else {
            Linear::forward_many(ws, xs, self.backend, self.par, outs)
        }
    }
}

/// RMSNorm as ggml computes it: the sum of squares in f64, `scale = 1/√(mean + ε)` in f32, then
/// `x·scale` times the weight.
#[derive(Debug, Clone, PartialEq)]
pub struct RmsNorm {
    pub weight: Vec<f32>,
    pub eps: f32,
}

impl RmsNorm {
    fn forward(&self, xs: &mut [f32], ex: &Exec) {
        let d = self.weight.len();
        // Four rows at a time: each row's f64 sum is a chain of dependent additions in element
        // order (ggml's order), and four chains side by side overlap.
        ex.rows(xs, 4 * d, &|_, x| self.rows(x));
        let whole = xs.len() / (4 * d) * 4 * d;
        self.rows(&mut xs[whole..]);
    }

    /// Normalises up to four rows of `x`.
    fn rows(&self, x: &mut [f32]) {
        let d = self.weight.len();
        let mut sums = [0.0f64; 4];
        let rows = x.len() / d;
        for i in 0..d {
            for (r, s) in sums.iter_mut().enumerate().take(rows) {
                let v = x[r * d + i] as f64;
                *s += v * v;
            }
        }
        for (x, sum) in x.chunks_exact_mut(d).zip(sums) {
            let mean = (sum / d as f64) as f32;
            let scale = 1.0 / libm::sqrtf(mean + self.eps);
            for (v, w) in x.iter_mut().zip(&self.weight) {
                *v = *v * scale * w;
            }
        }
    }
}

/// ggml's RoPE: pairs `(x[i], x[i + d/2])` (the NEOX mode llama.cpp uses for `bitnet`), rotated
/// by `θ = pos · base^(−2i/d)`, θ built by repeated multiplication in f32 as ggml does.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    pub head_dim: usize,
    pub theta_scale: f32,
}

impl Rope {
    pub fn new(head_dim: usize, base: f32) -> Rope {
        Rope { head_dim, theta_scale: libm::powf(base, -2.0 / head_dim as f32) }
    }

    /// `(cos θ_i, sin θ_i)` of position `pos`, one per pair.
    fn angles(&self, pos: usize) -> Vec<(f32, f32)> {
        let mut theta = pos as f32;
        (0..self.head_dim / 2)
            .map(|_| {
                let c = (libm::cosf(theta), libm::sinf(theta));
                theta *= self.theta_scale;
                c
            })
            .collect()
    }

    /// Rotates every head of `x` by the angles `cs` of its position.
    fn rotate(&self, x: &mut [f32], cs: &[(f32, f32)]) {
        let half = self.head_dim / 2;
        for head in x.chunks_exact_mut(self.head_dim) {
            for (i, &(cos, sin)) in cs.iter().enumerate() {
                let (x0, x1) = (head[i], head[i + half]);
                head[i] = x0 * cos - x1 * sin;
                head[i + half] = x0 * sin + x1 * cos;
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attention {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub sub_norm: RmsNorm,
    pub heads: usize,
    pub kv_heads: usize,
    pub rope: Rope,
}

impl Attention {
    /// `xs`: n normalised rows at positions `start..start + n`; their K and V join the cache.
    /// The output projection goes to `y`.
    fn forward(&self, xs: &[f32], start: usize, layer: &mut Layer, y: &mut [f32], ex: &Exec) -> Result<(), ModelError> {
        let hd = self.rope.head_dim;
        let (dim, kv_dim) = (self.heads * hd, self.kv_heads * hd);
        let n = xs.len() / self.q.shape().1;
        let Layer { kv: cache, scratch } = layer;
        if ex.reference && matches!(cache, Rows::F16 { .. }) {
            return Err(ModelError::ReferenceCache);
        }
        let q = sized(&mut scratch.q, n * dim);
        let (k, v) = (sized(&mut scratch.k, n * kv_dim), sized(&mut scratch.v, n * kv_dim));
        ex.linears(&[&self.q, &self.k, &self.v], xs, &mut [&mut *q, &mut *k, &mut *v])?;
        ex.warm(&[&self.o]);
        // Each token's angles once for its query and key, the tokens shared out to the threads.
        let angles = super::par::map(ex.par, n, &|i| Ok(self.rope.angles(start + i)))?;
        ex.rows(q, dim, &|i, q| self.rope.rotate(q, &angles[i]));
        ex.rows(k, kv_dim, &|i, k| self.rope.rotate(k, &angles[i]));
        // The new keys and values join the cache, rounded to F16 as ggml's cache is (an F16
        // cache rounds them as it stores them); attention reads them back from there.
        cache.store(start, (self.kv_heads, hd), k, v, !ex.reference);
        let out = sized(&mut scratch.att, n * dim);
        cache.read(Heads { attn: self, q, out: &mut *out, n, start, ex })?;
        // Again: the attention's job cancelled the first hint (the lines it brought stay).
        ex.warm(&[&self.o]);
        self.sub_norm.forward(out, ex);
        ex.linear(&self.o, out, y)?;
        Ok(())
    }
}

/// Attention's heads over a block's cache, once the new positions have joined it: what
/// [`Attention::forward`] hands the cache, to run on its rows whatever their element type.
struct Heads<'a> {
    attn: &'a Attention,
    /// The `n` tokens' rotated queries, and where their outputs go.
    q: &'a [f32],
    out: &'a mut [f32],
    n: usize,
    start: usize,
    ex: &'a Exec<'a>,
}

impl ReadRows<Result<(), crate::bitnet::BitnetError>> for Heads<'_> {
    fn read<K: Kv>(self, keys: &[K], values: &[K]) -> Result<(), crate::bitnet::BitnetError> {
        let Heads { attn, q, out, n, start, ex } = self;
        let hd = attn.rope.head_dim;
        let (dim, kv_dim) = (attn.heads * hd, attn.kv_heads * hd);
        // Each KV head's rows lie together, `hd` apart (see `cache`).
        let context = keys.len() / kv_dim;
        let outs = Disjoint::new(&mut *out);
        let scale = 1.0 / libm::sqrtf(hd as f32);
        let group_size = attn.heads / attn.kv_heads;
        // One work unit per (head, token), heads outermost: every thread gets whole heads, so
        // the long contexts of the late tokens are shared evenly.
        ex.par.ranges(attn.heads * n, &|units| {
            // Each group's rounded query rows and softmax weights, reused group after group.
            let (mut qs, mut ws): ([Vec<f32>; 4], [Vec<f32>; 4]) = Default::default();
            let mut u = units.start;
            while u < units.end {
                let (h, i) = (u / n, u % n);
                // Up to four neighbouring tokens of this head, which share every key and value
                // read.
                let group = (n - i).min(units.end - u).min(4);
                let kv = (h / group_size) * context * hd;
                let at = Group {
                    q,
                    dim,
                    head: h,
                    first_token: i,
                    start,
                    scale,
                    keys: &keys[kv..],
                    values: &values[kv..],
                    stride: hd,
                    ex,
                };
                let row = |t: usize| (i + t) * dim + h * hd;
                // SAFETY: unit (h, i + t) alone writes head h of token i + t's row, and the
                // threads' units are disjoint.
                let o = |t: usize| unsafe { outs.range_mut(row(t)..row(t) + hd) };
                let ([q0, q1, q2, q3], [w0, w1, w2, w3]) = (&mut qs, &mut ws);
                match group {
                    4 => at.attend([o(0), o(1), o(2), o(3)], [q0, q1, q2, q3], [w0, w1, w2, w3]),
                    3 => at.attend([o(0), o(1), o(2)], [q0, q1, q2], [w0, w1, w2]),
                    2 => at.attend([o(0), o(1)], [q0, q1], [w0, w1]),
                    _ => at.attend([o(0)], [q0], [w0]),
                }
                u += group;
            }
            Ok(())
        })
    }
}

/// Neighbouring tokens `first_token..` of one head in attention.
struct Group<'a, K> {
    /// Every token's rotated query row (`dim` values).
    q: &'a [f32],
    dim: usize,
    head: usize,
    first_token: usize,
    /// The position of token 0.
    start: usize,
    scale: f32,
    /// The cache rows from this head's keys and values on, a row every `stride` values.
    keys: &'a [K],
    values: &'a [K],
    stride: usize,
    ex: &'a Exec<'a>,
}

impl<K: Kv> Group<'_, K> {
    /// Token `first_token + t`'s attention output into `outs[t]`: its query rounded as ggml
    /// rounds a mul_mat's F32 operand (into `qs[t]`), scores over the causal positions
    /// `0..=start + token` (into `ws[t]`), softmax as ggml's soft_max (sum in f64), the weights
    /// rounded, then `Σ w·v`. The `Q` tokens go through each step together
    /// ([`attend::scores_many`] and its kin), which gives each one's bits alone.
    fn attend<const Q: usize>(
        &self,
        mut outs: [&mut [f32]; Q],
        mut qs: [&mut Vec<f32>; Q],
        mut ws: [&mut Vec<f32>; Q],
    ) {
        let hd = outs[0].len();
        for (t, (q, w)) in qs.iter_mut().zip(ws.iter_mut()).enumerate() {
            let i = self.first_token + t;
            q.clear();
            q.extend_from_slice(&self.q[i * self.dim + self.head * hd..][..hd]);
            self.ex.round_half(q);
            // Every score is written below.
            w.resize(self.start + i + 1, 0.0);
        }
        let mut ws = ws.map(|w| &mut w[..]);
        // Rounded to F16 (queries here, the cache as it was written, the weights below), every
        // product is exact in f32 and may be fused (see `attend`'s notes).
        let products = if self.ex.reference { attend::Products::Rounded } else { attend::Products::Exact };
        let (keys, stride) = (self.keys, self.stride);
        attend::scores_many(qs.map(|q| &q[..]), keys, stride, self.scale, ws.each_mut().map(|w| &mut **w), products);
        attend::softmax_many(ws.each_mut().map(|w| &mut **w));
        for w in ws.iter_mut() {
            self.ex.round_half(w);
        }
        for o in outs.iter_mut() {
            o.fill(0.0);
        }
        attend::accumulate_many(outs, ws.each_ref().map(|w| &**w), self.values, self.stride, products);
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ffn {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
    pub sub_norm: RmsNorm,
}

impl Ffn {
    /// `xs`: n normalised rows; the down projection goes to `y`.
    fn forward(&self, xs: &[f32], scratch: &mut Scratch, y: &mut [f32], ex: &Exec) -> Result<(), ModelError> {
        let n = xs.len() / self.up.shape().1;
        let hidden = self.up.shape().0;
        let gate = sized(&mut scratch.gate, n * hidden);
        // SiLU (ggml computes its own exp approximation too), then the product with the up
        // projection: in the GEMM where it can run there, else on the two projections' rows.
        let fused = !ex.reference
            && Linear::forward_gated(&self.gate, &self.up, xs, ex.backend, ex.par, gate, &attend::silu_mul)?;
        if !fused {
            let up = sized(&mut scratch.up, n * hidden);
            ex.linears(&[&self.up, &self.gate], xs, &mut [&mut *up, &mut *gate])?;
            ex.warm(&[&self.down]);
            let up = &*up;
            ex.rows(gate, hidden, &|i, g| attend::silu_mul(g, &up[i * hidden..][..hidden]));
        }
        self.sub_norm.forward(gate, ex);
        ex.linear(&self.down, gate, y)?;
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub attn_norm: RmsNorm,
    pub attn: Attention,
    pub ffn_norm: RmsNorm,
    pub ffn: Ffn,
}

impl Block {
    /// Runs rows `x` (positions `start..`) through the block in place; their keys and values
    /// join this block's cache.
    pub fn forward(&self, x: &mut [f32], start: usize, mut layer: Layer, ex: &Exec) -> Result<(), ModelError> {
        let mut h = core::mem::take(&mut layer.scratch.h);
        let mut y = core::mem::take(&mut layer.scratch.y);
        let result = self.residuals(x, start, &mut layer, sized(&mut h, x.len()), sized(&mut y, x.len()), ex);
        (layer.scratch.h, layer.scratch.y) = (h, y);
        result
    }

    /// `x += Attention(Norm(x))`, then `x += Ffn(Norm(x))`, with `h` and `y` to work in.
    fn residuals(
        &self,
        x: &mut [f32],
        start: usize,
        layer: &mut Layer,
        h: &mut [f32],
        y: &mut [f32],
        ex: &Exec,
    ) -> Result<(), ModelError> {
        // Each product's weights are warmed as the one before it ends (the next block's by
        // the caller of this one).
        h.copy_from_slice(x);
        self.attn_norm.forward(h, ex);
        self.attn.forward(h, start, layer, y, ex)?;
        ex.warm(&[&self.ffn.up, &self.ffn.gate]);
        x.iter_mut().zip(&*y).for_each(|(x, a)| *x += a);
        h.copy_from_slice(x);
        self.ffn_norm.forward(h, ex);
        self.ffn.forward(h, layer.scratch, y, ex)?;
        x.iter_mut().zip(&*y).for_each(|(x, f)| *x += f);
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Model {
    pub config: Config,
    pub embed: Table,
    /// `None`: the output layer is the embedding table.
    pub output: Option<Table>,
    pub blocks: Vec<Block>,
    pub output_norm: RmsNorm,
    pub tokenizer: Option<Tokenizer>,
}

/// Which positions' logits [`Model::forward`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    Last,
    All,
}

impl Model {
    /// Runs `tokens` at the cache's next positions and returns the logits of the last one (or of
    /// every one), `vocab` values each.
    pub fn forward(&self, tokens: &[u32], cache: &mut Cache, ex: &Exec, which: Logits) -> Result<Vec<f32>, ModelError> {
        let (n, start) = (tokens.len(), cache.len);
        if start + n > cache.context {
            return Err(ModelError::Context { pos: start + n, context: cache.context });
        }
        let mut x = self.embed(tokens)?;
        for (b, block) in self.blocks.iter().enumerate() {
            let a = &block.attn;
            ex.warm(&[&a.q, &a.k, &a.v]);
            block.forward(&mut x, start, cache.layer(b), ex)?;
        }
        ex.warm_spans(&[&self.output.as_ref().unwrap_or(&self.embed).data]);
        cache.len = start + n;
        self.head(&mut x, ex, which)
    }

    /// The embedding rows of `tokens`, `dim` values each.
    pub fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        if tokens.is_empty() {
            return Err(ModelError::NoTokens);
        }
        let mut x = vec![0.0f32; tokens.len() * c.dim];
        for (&t, row) in tokens.iter().zip(x.chunks_exact_mut(c.dim)) {
            if t as usize >= self.embed.rows {
                return Err(ModelError::Token { id: t as usize, vocab: self.embed.rows });
            }
            self.embed.row(t as usize, row);
        }
        Ok(x)
    }

    /// The logits of rows `x` after the last block (of the last row, or of every one).
    pub fn head(&self, x: &mut [f32], ex: &Exec, which: Logits) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let n = x.len() / c.dim;
        if n == 0 {
            return Err(ModelError::NoTokens);
        }
        let rows = match which {
            Logits::Last => &mut x[(n - 1) * c.dim..],
            Logits::All => &mut x[..],
        };
        self.output_norm.forward(rows, ex);
        let out = self.output.as_ref().unwrap_or(&self.embed);
        let mut logits = vec![0.0f32; rows.len() / c.dim * out.rows];
        if ex.reference {
            // Plain sums, no F16 rounding of the activations.
            let mut w = vec![0.0f32; c.dim];
            for (x, o) in rows.chunks_exact(c.dim).zip(logits.chunks_exact_mut(out.rows)) {
                for (r, y) in o.iter_mut().enumerate() {
                    out.row(r, &mut w);
                    *y = w.iter().zip(x).map(|(a, b)| a * b).sum();
                }
            }
        } else {
            out.logits(rows, ex.simd, ex.par, &mut logits)?;
        }
        Ok(logits)
    }
}
