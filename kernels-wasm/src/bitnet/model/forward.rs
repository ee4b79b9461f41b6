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

use super::attend;
use super::config::Config;
use super::linear::Linear;
use super::par::Parallel;
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

/// The KV cache of every layer: `context × kv_dim` keys and values each.
#[derive(Debug, Clone)]
pub struct Cache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Positions filled.
    pub len: usize,
    pub context: usize,
}

impl Cache {
    pub fn new(c: &Config, context: usize) -> Cache {
        Cache::for_layers(c, c.layers, context)
    }

    /// A cache for `layers` blocks of a model shaped `c` (an ESP32 node holds a few).
    pub fn for_layers(c: &Config, layers: usize, context: usize) -> Cache {
        let size = context * c.kv_dim();
        Cache { k: vec![vec![0.0; size]; layers], v: vec![vec![0.0; size]; layers], len: 0, context }
    }

    /// Keys and values of the cache's block `b`.
    pub fn layer(&mut self, b: usize) -> (&mut [f32], &mut [f32]) {
        (&mut self.k[b], &mut self.v[b])
    }

    /// Bytes the cache holds.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|l| l.len() * 4).sum()
    }

    pub fn clear(&mut self) {
        self.len = 0;
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
    fn forward(
        &self,
        xs: &[f32],
        start: usize,
        k_cache: &mut [f32],
        v_cache: &mut [f32],
        ex: &Exec,
    ) -> Result<Vec<f32>, ModelError> {
        let hd = self.rope.head_dim;
        let (dim, kv_dim) = (self.heads * hd, self.kv_heads * hd);
        let n = xs.len() / self.q.shape().1;
        let (mut q, mut k, mut v) = (vec![0.0; n * dim], vec![0.0; n * kv_dim], vec![0.0; n * kv_dim]);
        ex.linears(&[&self.q, &self.k, &self.v], xs, &mut [&mut q, &mut k, &mut v])?;
        // Each token's angles once for its query and key, the tokens shared out to the threads.
        let angles = super::par::map(ex.par, n, &|i| Ok(self.rope.angles(start + i)))?;
        ex.rows(&mut q, dim, &|i, q| self.rope.rotate(q, &angles[i]));
        ex.rows(&mut k, kv_dim, &|i, k| self.rope.rotate(k, &angles[i]));
        let at = start * kv_dim..(start + n) * kv_dim;
        k_cache[at.clone()].copy_from_slice(&k);
        v_cache[at.clone()].copy_from_slice(&v);
        ex.round_half(&mut k_cache[at.clone()]);
        ex.round_half(&mut v_cache[at]);
        let (k_cache, v_cache) = (&*k_cache, &*v_cache);
        let scale = 1.0 / libm::sqrtf(hd as f32);
        let group_size = self.heads / self.kv_heads;
        // One work unit per (head, token), heads outermost: every thread gets whole heads, so
        // the long contexts of the late tokens are shared evenly.
        let mut by_head = vec![0.0f32; n * dim];
        ex.par.split(&mut by_head, hd, &|first, chunk| {
            let mut units: Vec<&mut [f32]> = chunk.chunks_exact_mut(hd).collect();
            let mut u = 0;
            while u < units.len() {
                let (h, i) = ((first + u) / n, (first + u) % n);
                // Up to four neighbouring tokens of this head, which share every key and value
                // read (units run head by head, token by token).
                let group = (n - i).min(units.len() - u).min(4);
                let outs = &mut units[u..u + group];
                let at = Group { q: &q, dim, head: h, first_token: i, start, scale, kv: (h / group_size) * hd };
                match outs {
                    [a, b, c, d] => at.attend([a, b, c, d], k_cache, v_cache, kv_dim, ex),
                    [a, b, c] => at.attend([a, b, c], k_cache, v_cache, kv_dim, ex),
                    [a, b] => at.attend([a, b], k_cache, v_cache, kv_dim, ex),
                    [a] => at.attend([a], k_cache, v_cache, kv_dim, ex),
                    _ => {}
                }
                u += group;
            }
            Ok(())
        })?;
        let mut out = vec![0.0f32; n * dim];
        for h in 0..self.heads {
            for i in 0..n {
                out[i * dim + h * hd..][..hd].copy_from_slice(&by_head[(h * n + i) * hd..][..hd]);
            }
        }
        self.sub_norm.forward(&mut out, ex);
        let mut y = vec![0.0; n * self.o.shape().0];
        ex.linear(&self.o, &out, &mut y)?;
        Ok(y)
    }
}

/// Neighbouring tokens `first_token..` of one head in attention.
struct Group<'a> {
    /// Every token's rotated query row (`dim` values).
    q: &'a [f32],
    dim: usize,
    head: usize,
    first_token: usize,
    /// The position of token 0.
    start: usize,
    scale: f32,
    /// Where this head's keys and values start in a cache row.
    kv: usize,
}

impl Group<'_> {
    /// Token `first_token + t`'s attention output into `outs[t]` (zero on entry): its query
    /// rounded as ggml rounds a mul_mat's F32 operand, scores over the causal positions
    /// `0..=start + token`, softmax as ggml's soft_max (sum in f64), the weights rounded, then
    /// `Σ w·v`. The `Q` tokens go through each step together ([`attend::scores_many`] and its
    /// kin), which gives each one's bits alone.
    fn attend<const Q: usize>(
        &self,
        outs: [&mut &mut [f32]; Q],
        k_cache: &[f32],
        v_cache: &[f32],
        stride: usize,
        ex: &Exec,
    ) {
        let hd = outs[0].len();
        let qs: [Vec<f32>; Q] = core::array::from_fn(|t| {
            let i = self.first_token + t;
            let mut qh = self.q[i * self.dim + self.head * hd..][..hd].to_vec();
            ex.round_half(&mut qh);
            qh
        });
        let mut ws: [Vec<f32>; Q] = core::array::from_fn(|t| vec![0.0f32; self.start + self.first_token + t + 1]);
        let (keys, values) = (&k_cache[self.kv..], &v_cache[self.kv..]);
        attend::scores_many(qs.each_ref().map(|q| &q[..]), keys, stride, self.scale, ws.each_mut().map(|w| &mut w[..]));
        attend::softmax_many(ws.each_mut().map(|w| &mut w[..]));
        for w in ws.iter_mut() {
            ex.round_half(w);
        }
        attend::accumulate_many(outs.map(|o| &mut **o), ws.each_ref().map(|w| &w[..]), values, stride);
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
    fn forward(&self, xs: &[f32], ex: &Exec) -> Result<Vec<f32>, ModelError> {
        let n = xs.len() / self.up.shape().1;
        let hidden = self.up.shape().0;
        let (mut gate, mut up) = (vec![0.0; n * hidden], vec![0.0; n * hidden]);
        ex.linears(&[&self.up, &self.gate], xs, &mut [&mut up, &mut gate])?;
        // SiLU (ggml computes its own exp approximation too), then the product with the up
        // projection.
        ex.rows(&mut gate, hidden, &|i, g| attend::silu_mul(g, &up[i * hidden..][..hidden]));
        self.sub_norm.forward(&mut gate, ex);
        let mut y = vec![0.0; n * self.down.shape().0];
        ex.linear(&self.down, &gate, &mut y)?;
        Ok(y)
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
    pub fn forward(
        &self,
        x: &mut [f32],
        start: usize,
        k_cache: &mut [f32],
        v_cache: &mut [f32],
        ex: &Exec,
    ) -> Result<(), ModelError> {
        let mut h = x.to_vec();
        self.attn_norm.forward(&mut h, ex);
        let a = self.attn.forward(&h, start, k_cache, v_cache, ex)?;
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
        let mut h = x.to_vec();
        self.ffn_norm.forward(&mut h, ex);
        let f = self.ffn.forward(&h, ex)?;
        x.iter_mut().zip(&f).for_each(|(x, f)| *x += f);
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
            block.forward(&mut x, start, &mut cache.k[b], &mut cache.v[b], ex)?;
        }
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
