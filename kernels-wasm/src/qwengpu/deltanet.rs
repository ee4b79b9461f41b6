//! A Gated DeltaNet layer as Qwen3.5 computes it (FACTS §2, HF `modeling_qwen3_5.py`), in plain
//! f32, token by token with its recurrent state:
//!
//! ```text
//! qkv = W_qkv·x;  z = W_z·x;  b = W_b·x;  a = W_a·x
//! qkv = silu(causal depthwise conv1d(qkv), kernel 4, no bias)
//! β = sigmoid(b);  g = −exp(A_log)·softplus(a + dt_bias);  α = exp(g)
//! q, k = x / sqrt(Σx² + 1e-6) per head;  q /= sqrt(d_k)
//! per head:  S ← α·S;  kv = Sᵀk;  δ = β·(v − kv);  S ← S + k ⊗ δ;  o = Sᵀq
//! y = W_out · concat_h(o_h / sqrt(mean(o_h²) + ε) · w · silu(z_h))
//! ```
//!
//! Nothing here is specialised to the machine: `memory` chooses weights for which this exact
//! arithmetic stores and recalls words without error.

use alloc::vec;
use alloc::vec::Vec;

/// Qwen3.5's kernel size of the short causal convolution.
pub const CONV: usize = 4;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// PyTorch's softplus (threshold 20: above it, x itself).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

/// A matrix as its nonzero entries, row by row in column order: the machine's projections are a
/// few entries a row over a stream thousands wide, so dense they would be hundreds of megabytes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    entries: Vec<Vec<(u32, f32)>>,
}

impl Matrix {
    pub fn zeros(rows: usize, cols: usize) -> Matrix {
        Matrix { rows, cols, entries: vec![Vec::new(); rows] }
    }

    /// From a row-major dense matrix of `cols` columns (a partial last row is dropped).
    pub fn from_dense(w: &[f32], cols: usize) -> Matrix {
        let mut m = Matrix::zeros(w.len() / cols.max(1), cols);
        for (row, out) in w.chunks_exact(cols.max(1)).zip(&mut m.entries) {
            out.extend(row.iter().enumerate().filter(|(_, &v)| v != 0.0).map(|(c, &v)| (c as u32, v)));
        }
        m
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Entries as a dense matrix would hold them.
    pub fn dense_len(&self) -> usize {
        self.rows * self.cols
    }

    pub fn nonzero(&self) -> usize {
        self.entries.iter().map(Vec::len).sum()
    }

    pub fn get(&self, r: usize, c: usize) -> f32 {
        let row = &self.entries[r];
        row.binary_search_by_key(&(c as u32), |e| e.0).map_or(0.0, |i| row[i].1)
    }

    /// Sets entry `(r, c)` (a zero removes it). Panics outside the shape, like indexing.
    pub fn set(&mut self, r: usize, c: usize, v: f32) {
        assert!(c < self.cols, "column {c} of a matrix of {} columns", self.cols);
        let row = &mut self.entries[r];
        match (row.binary_search_by_key(&(c as u32), |e| e.0), v != 0.0) {
            (Ok(i), true) => row[i].1 = v,
            (Ok(i), false) => {
                row.remove(i);
            }
            (Err(i), true) => row.insert(i, (c as u32, v)),
            (Err(_), false) => {}
        }
    }

    /// Row `r`'s nonzero entries, in column order.
    pub fn row(&self, r: usize) -> &[(u32, f32)] {
        &self.entries[r]
    }

    /// Every nonzero entry, `(row, column, value)`, row-major.
    pub fn triplets(&self) -> impl Iterator<Item = (usize, usize, f32)> + '_ {
        self.entries.iter().enumerate().flat_map(|(r, row)| row.iter().map(move |&(c, v)| (r, c as usize, v)))
    }

    /// `y = W·x`, each row summed in column order. Bit-identical to summing every column of the
    /// dense matrix: a zero weight's product is ±0 (for finite `x`), which leaves a nonzero sum
    /// as it is and a zero sum at +0 (the running sum starts at +0, and +0 + −0 is +0).
    pub fn matvec(&self, x: &[f32]) -> Vec<f32> {
        self.entries.iter().map(|row| row.iter().fold(0.0, |acc, &(c, v)| acc + v * x[c as usize])).collect()
    }
}

/// The weights of one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaNetWeights {
    pub d_model: usize,
    pub heads: usize,
    pub d_k: usize,
    pub d_v: usize,
    /// `(heads·(2·d_k + d_v)) × d_model`: q of every head, then k, then v.
    pub w_qkv: Matrix,
    /// `(heads·d_v) × d_model`.
    pub w_z: Matrix,
    /// `heads × d_model` each.
    pub w_b: Matrix,
    pub w_a: Matrix,
    pub a_log: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// Depthwise convolution, `channels × CONV` (oldest tap first).
    pub conv: Vec<f32>,
    /// RMSNormGated's scale (`d_v`, shared by the heads) and ε.
    pub norm: Vec<f32>,
    pub eps: f32,
    /// `d_out × (heads·d_v)`.
    pub w_out: Matrix,
}

impl DeltaNetWeights {
    pub fn channels(&self) -> usize {
        self.heads * (2 * self.d_k + self.d_v)
    }

    /// The projections' entries, as dense matrices.
    pub fn matrix_parameters(&self) -> usize {
        [&self.w_qkv, &self.w_z, &self.w_b, &self.w_a, &self.w_out].iter().map(|m| m.dense_len()).sum()
    }

    /// Parameters, as a model card counts them (the matrices dense).
    pub fn parameters(&self) -> usize {
        let vectors = [&self.a_log, &self.dt_bias, &self.conv, &self.norm];
        self.matrix_parameters() + vectors.iter().map(|v| v.len()).sum::<usize>()
    }

    /// Nonzero parameters.
    pub fn nonzero(&self) -> usize {
        let matrices = [&self.w_qkv, &self.w_z, &self.w_b, &self.w_a, &self.w_out];
        let vectors = [&self.a_log, &self.dt_bias, &self.conv, &self.norm];
        matrices.iter().map(|m| m.nonzero()).sum::<usize>()
            + vectors.iter().flat_map(|v| v.iter()).filter(|&&v| v != 0.0).count()
    }

    /// That every tensor has the size the shape gives, over a stream of `d_model` channels (so a
    /// step cannot index past one).
    pub fn sizes_agree(&self) -> bool {
        let (d, h, dv) = (self.d_model, self.heads, self.d_v);
        let channels = self.channels();
        let m = |m: &Matrix, rows, cols| m.rows() == rows && m.cols() == cols;
        m(&self.w_qkv, channels, d)
            && m(&self.w_z, h * dv, d)
            && m(&self.w_b, h, d)
            && m(&self.w_a, h, d)
            && m(&self.w_out, d, h * dv)
            && self.a_log.len() == h
            && self.dt_bias.len() == h
            && self.conv.len() == channels * CONV
            && self.norm.len() == dv
    }
}

/// A layer with its recurrent state: `S` per head (`d_k × d_v`, row i is key i's value) and
/// the convolution's last `CONV − 1` inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaNet {
    pub w: DeltaNetWeights,
    pub state: Vec<f32>,
    conv_history: Vec<Vec<f32>>,
}

impl DeltaNet {
    pub fn new(w: DeltaNetWeights) -> Self {
        let state = vec![0.0; w.heads * w.d_k * w.d_v];
        let conv_history = vec![vec![0.0; w.channels()]; CONV - 1];
        DeltaNet { w, state, conv_history }
    }

    /// Row `i` of head `h`'s state.
    pub fn row(&self, h: usize, i: usize) -> &[f32] {
        let (dk, dv) = (self.w.d_k, self.w.d_v);
        &self.state[(h * dk + i) * dv..(h * dk + i + 1) * dv]
    }

    /// One token: updates the state and returns the layer's output.
    pub fn step(&mut self, x: &[f32]) -> Vec<f32> {
        let w = &self.w;
        let (h_n, dk, dv) = (w.heads, w.d_k, w.d_v);
        // Projections, then the causal depthwise convolution over the last CONV inputs + SiLU.
        let qkv_in = w.w_qkv.matvec(x);
        let qkv: Vec<f32> = (0..qkv_in.len())
            .map(|c| {
                let taps = &w.conv[c * CONV..(c + 1) * CONV];
                let past = (0..CONV - 1).fold(0.0, |acc, j| acc + taps[j] * self.conv_history[j][c]);
                silu(past + taps[CONV - 1] * qkv_in[c])
            })
            .collect();
        self.conv_history.remove(0);
        self.conv_history.push(qkv_in);
        let z = w.w_z.matvec(x);
        let b = w.w_b.matvec(x);
        let a = w.w_a.matvec(x);
        let mut out = Vec::with_capacity(h_n * dv);
        for h in 0..h_n {
            let l2 = |v: &[f32]| {
                let n = rsqrt(v.iter().fold(0.0, |acc, x| acc + x * x) + 1e-6);
                v.iter().map(|x| x * n).collect::<Vec<f32>>()
            };
            let scale = 1.0 / (dk as f32).sqrt();
            let q: Vec<f32> = l2(&qkv[h * dk..(h + 1) * dk]).iter().map(|x| x * scale).collect();
            let k = l2(&qkv[h_n * dk + h * dk..h_n * dk + (h + 1) * dk]);
            let v = &qkv[2 * h_n * dk + h * dv..2 * h_n * dk + (h + 1) * dv];
            let beta = sigmoid(b[h]);
            let alpha = (-w.a_log[h].exp() * softplus(a[h] + w.dt_bias[h])).exp();
            let s = &mut self.state[h * dk * dv..(h + 1) * dk * dv];
            for x in s.iter_mut() {
                *x *= alpha;
            }
            // kv = Sᵀk; δ = β(v − kv); S += k ⊗ δ.
            let kv: Vec<f32> = (0..dv).map(|j| (0..dk).fold(0.0, |acc, i| acc + s[i * dv + j] * k[i])).collect();
            let delta: Vec<f32> = (0..dv).map(|j| beta * (v[j] - kv[j])).collect();
            for i in 0..dk {
                for j in 0..dv {
                    s[i * dv + j] += k[i] * delta[j];
                }
            }
            let o: Vec<f32> = (0..dv).map(|j| (0..dk).fold(0.0, |acc, i| acc + s[i * dv + j] * q[i])).collect();
            // RMSNormGated: o · rsqrt(mean(o²) + ε) · w · silu(z).
            let n = rsqrt(o.iter().fold(0.0, |acc, x| acc + x * x) / dv as f32 + w.eps);
            out.extend((0..dv).map(|j| o[j] * n * w.norm[j] * silu(z[h * dv + j])));
        }
        w.w_out.matvec(&out)
    }
}
