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

mod regime;
mod state;
pub use regime::{Regime, Regimes};
pub use state::{State, StateRows};

/// Qwen3.5's kernel size of the short causal convolution.
pub const CONV: usize = 4;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x · sigmoid(x)`, without the exponential where its value is known: ±0 at ±0 (`0.5 · ±0`),
/// `x` from 32 on (`exp(−32)` is below half an ulp of 1), −0 from −89 down (`exp(89)` overflows
/// f32, so the sigmoid is `1/∞`). Most of a machine layer's channels are one of those.
fn silu(x: f32) -> f32 {
    if x == 0.0 || x >= 32.0 {
        x
    } else if x <= -89.0 {
        -0.0
    } else {
        x * sigmoid(x)
    }
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

/// The entries of `v` that can reach a sum, with their places, in order: not ±0, and with
/// identity taps not at or below −89 (silu's −0). A memory layer's keys and queries are one such
/// entry among 4,096, so chunks of 16 are tested first, with a branch-free OR the compiler
/// vectorises.
fn hot(v: &[f32], identity: bool) -> impl Iterator<Item = (usize, f32)> + '_ {
    let skip = move |x: f32| x == 0.0 || (identity && x <= -89.0);
    v.chunks(16).enumerate().filter(move |(_, c)| c.iter().fold(false, |any, &x| any | !skip(x))).flat_map(
        move |(k, c)| c.iter().enumerate().filter(move |(_, &x)| !skip(x)).map(move |(i, &x)| (16 * k + i, x)),
    )
}

/// A matrix as its nonzero entries, column by column in row order: the machine's projections
/// are a few entries a row over a stream thousands wide (dense they would be hundreds of
/// megabytes), and at a position most of the stream's channels are 0, so a product visits only
/// the columns of the channels that are not.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    columns: Vec<Vec<(u32, f32)>>,
}

impl Matrix {
    pub fn zeros(rows: usize, cols: usize) -> Matrix {
        Matrix { rows, cols, columns: vec![Vec::new(); cols] }
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
        self.columns.iter().map(Vec::len).sum()
    }

    pub fn get(&self, r: usize, c: usize) -> f32 {
        let col = &self.columns[c];
        col.binary_search_by_key(&(r as u32), |e| e.0).map_or(0.0, |i| col[i].1)
    }

    /// Sets entry `(r, c)` (a zero removes it). Panics outside the shape, like indexing.
    pub fn set(&mut self, r: usize, c: usize, v: f32) {
        assert!(r < self.rows, "row {r} of a matrix of {} rows", self.rows);
        let col = &mut self.columns[c];
        match (col.binary_search_by_key(&(r as u32), |e| e.0), v != 0.0) {
            (Ok(i), true) => col[i].1 = v,
            (Ok(i), false) => {
                col.remove(i);
            }
            (Err(i), true) => col.insert(i, (r as u32, v)),
            (Err(_), false) => {}
        }
    }

    /// The rows with a nonzero entry, in order.
    pub fn nonzero_rows(&self) -> Vec<usize> {
        let mut rows: Vec<usize> = self.columns.iter().flatten().map(|&(r, _)| r as usize).collect();
        rows.sort_unstable();
        rows.dedup();
        rows
    }

    /// Every nonzero entry, `(row, column, value)`, column by column.
    pub fn triplets(&self) -> impl Iterator<Item = (usize, usize, f32)> + '_ {
        self.columns.iter().enumerate().flat_map(|(c, col)| col.iter().map(move |&(r, v)| (r as usize, c, v)))
    }

    /// `y = W·x`, each row's products summed in column order. Bit-identical to the dense sum over
    /// every column: a skipped product (a zero weight, or a zero `x_c`) is ±0 for finite `x`, and
    /// a sum that starts at +0 is never −0 (+0 + −0 is +0), so ±0 leaves it as it is.
    pub fn matvec(&self, x: &[f32]) -> Vec<f32> {
        let mut y = Vec::new();
        self.matvec_into(x, &mut y);
        y
    }

    /// [`Self::matvec`] into `y`'s allocation.
    pub fn matvec_into(&self, x: &[f32], y: &mut Vec<f32>) {
        y.clear();
        y.resize(self.rows, 0.0);
        for (col, &xc) in self.columns.iter().zip(x) {
            if xc != 0.0 {
                for &(r, w) in col {
                    y[r as usize] += w * xc;
                }
            }
        }
    }
}

/// A [`Matrix`] packed for products: its nonempty columns only, their entries in one array.
///
/// A machine layer's `W_z`, `W_b` and `W_a` have 8 entries over 2,304 columns, and at a position
/// a few hundred channels are nonzero: [`Matrix::matvec`] loads the column of each of those
/// channels, and those scattered loads were a tenth of a launch's time (perf, 2026-12-07).
/// Here a product visits the nonempty columns, in order.
#[derive(Debug, Clone, PartialEq, Default)]
struct Csc {
    rows: usize,
    /// The nonempty columns, ascending; column `cols[k]`'s entries are `entries[at[k]..at[k + 1]]`.
    cols: Vec<u32>,
    at: Vec<u32>,
    entries: Vec<(u32, f32)>,
}

impl Csc {
    fn new(m: &Matrix) -> Csc {
        let (mut cols, mut at, mut entries) = (Vec::new(), vec![0u32], Vec::new());
        for (c, col) in m.columns.iter().enumerate().filter(|(_, col)| !col.is_empty()) {
            cols.push(c as u32);
            entries.extend_from_slice(col);
            at.push(entries.len() as u32);
        }
        Csc { rows: m.rows, cols, at, entries }
    }

    /// [`Matrix::matvec_into`]'s bits (it skips the same products).
    pub fn matvec_into(&self, x: &[f32], y: &mut Vec<f32>) {
        y.clear();
        y.resize(self.rows, 0.0);
        self.add_columns(x, y, 0);
    }

    /// Adds the products of nonempty columns `k..` (in order) to `y`.
    fn add_columns(&self, x: &[f32], y: &mut [f32], k: usize) {
        for (k, &c) in self.cols.iter().enumerate().skip(k) {
            let xc = x.get(c as usize).copied().unwrap_or(0.0);
            if xc != 0.0 {
                for &(r, w) in &self.entries[self.at[k] as usize..self.at[k + 1] as usize] {
                    y[r as usize] += w * xc;
                }
            }
        }
    }

    /// [`Self::matvec_into`] with the first column's share that `x` reaches kept in `cache` for
    /// the next product whose first such column and value are the same. At every machine position
    /// that column is the bias, normed to the same value (§2), and in a memory layer's q/k/v
    /// projection it has an entry in nearly every row (17,206 of 19,272): copying its share
    /// replaces that many scattered adds. The bits are the same: a row starts at `0 + w·x` of that
    /// column either way, and the later columns are added in the same order.
    pub fn matvec_cached(&self, x: &[f32], y: &mut Vec<f32>, cache: &mut FirstColumn) {
        let reached = |&c: &u32| x.get(c as usize).is_some_and(|&v| v != 0.0);
        let Some(k) = self.cols.iter().position(reached) else {
            return self.matvec_into(x, y);
        };
        let key = (k, x[self.cols[k] as usize].to_bits());
        if cache.key != Some(key) || cache.y.len() != self.rows {
            cache.y.clear();
            cache.y.resize(self.rows, 0.0);
            let xc = x[self.cols[k] as usize];
            for &(r, w) in &self.entries[self.at[k] as usize..self.at[k + 1] as usize] {
                cache.y[r as usize] += w * xc;
            }
            cache.key = Some(key);
        }
        y.clear();
        y.extend_from_slice(&cache.y);
        self.add_columns(x, y, k + 1);
    }
}

/// A product's first reached column and its share ([`Csc::matvec_cached`]).
#[derive(Debug, Clone, Default)]
struct FirstColumn {
    /// The column (its place among the nonempty ones) and its value's bits.
    key: Option<(usize, u32)>,
    y: Vec<f32>,
}

/// A cache: layers in the same state are equal whatever their caches hold.
impl PartialEq for FirstColumn {
    fn eq(&self, _: &FirstColumn) -> bool {
        true
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

    /// The projections by name (a checkpoint stores them under these).
    pub fn matrices(&self) -> [(&'static str, &Matrix); 5] {
        [("w_qkv", &self.w_qkv), ("w_z", &self.w_z), ("w_b", &self.w_b), ("w_a", &self.w_a), ("w_out", &self.w_out)]
    }

    /// The per-head vectors, the convolution taps and the norm weights.
    fn vectors(&self) -> [&[f32]; 4] {
        [&self.a_log, &self.dt_bias, &self.conv, &self.norm]
    }

    /// The projections' entries, as dense matrices.
    pub fn matrix_parameters(&self) -> usize {
        self.matrices().iter().map(|(_, m)| m.dense_len()).sum()
    }

    /// Parameters, as a model card counts them (the matrices dense).
    pub fn parameters(&self) -> usize {
        self.matrix_parameters() + self.vectors().iter().map(|v| v.len()).sum::<usize>()
    }

    /// Nonzero parameters.
    pub fn nonzero(&self) -> usize {
        self.matrices().iter().map(|(_, m)| m.nonzero()).sum::<usize>()
            + self.vectors().iter().flat_map(|v| v.iter()).filter(|&&v| v != 0.0).count()
    }

    /// Whether every channel's convolution taps are `(0, …, 0, 1)`, as in every machine layer:
    /// then a channel is `silu(+0 + x)` of its projection `x` alone.
    pub fn identity_taps(&self) -> bool {
        self.conv.chunks_exact(CONV).all(|t| t[..CONV - 1].iter().all(|&t| t == 0.0) && t[CONV - 1] == 1.0)
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
/// the convolution's last `CONV − 1` inputs (none with identity taps, which do not read them).
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaNet {
    w: DeltaNetWeights,
    pub state: Vec<f32>,
    conv_history: Vec<Vec<f32>>,
    /// The buffer the next input's projection goes into (the oldest input's, recycled): a
    /// machine layer's projections are hundreds of thousands of channels.
    spare: Vec<f32>,
    /// Whether every channel's taps are `(0, …, 0, 1)`, as in every machine layer: then a
    /// channel is `silu(+0 + x)` of its projection `x` alone.
    identity: bool,
    /// The projections packed (`W_qkv`, `W_z`, `W_b`, `W_a`, `W_out`), and the q/k/v
    /// projection's first column's share from the last position.
    packed: [Csc; 5],
    first: FirstColumn,
    /// Where the non-linear steps ran, once [`Self::watch`] asked.
    pub regimes: Option<Regimes>,
    /// Every input since [`Self::record`] asked, as its nonzero channels (the GPU port's test
    /// replays them).
    pub tape: Option<Tape>,
}

/// The inputs a layer was given, each as its `(channel, value)` entries that are not +0.
#[derive(Debug, Clone, Default)]
pub struct Tape(pub Vec<Vec<(u32, f32)>>);

/// A recording: layers in the same state are equal whatever they recorded.
impl PartialEq for Tape {
    fn eq(&self, _: &Tape) -> bool {
        true
    }
}

impl Tape {
    /// Records `x` as its entries that are not +0 (−0 is kept: it is not +0's bits).
    pub fn push(&mut self, x: &[f32]) {
        self.0.push(x.iter().enumerate().filter(|(_, v)| v.to_bits() != 0).map(|(c, &v)| (c as u32, v)).collect());
    }

    /// Input `i` as the layer saw it, `d_model` channels.
    pub fn input(&self, i: usize, d_model: usize) -> Vec<f32> {
        let mut x = vec![0.0; d_model];
        for &(c, v) in &self.0[i] {
            x[c as usize] = v;
        }
        x
    }
}

impl DeltaNet {
    pub fn new(w: DeltaNetWeights) -> Self {
        let state = vec![0.0; w.heads * w.d_k * w.d_v];
        let identity = w.identity_taps();
        let conv_history = if identity { Vec::new() } else { vec![vec![0.0; w.channels()]; CONV - 1] };
        let packed = w.matrices().map(|(_, m)| Csc::new(m));
        let first = FirstColumn::default();
        DeltaNet { w, state, conv_history, spare: Vec::new(), identity, packed, first, regimes: None, tape: None }
    }

    pub fn weights(&self) -> &DeltaNetWeights {
        &self.w
    }

    /// Row `i` of head `h`'s state.
    pub fn row(&self, h: usize, i: usize) -> &[f32] {
        let (dk, dv) = (self.w.d_k, self.w.d_v);
        &self.state[(h * dk + i) * dv..(h * dk + i + 1) * dv]
    }

    /// Counts from now on where the non-linear steps' arguments lie ([`Regimes`]).
    pub fn watch(&mut self) {
        self.regimes.get_or_insert_with(Regimes::default);
    }

    /// Records every input from now on ([`Tape`]).
    pub fn record(&mut self) {
        self.tape.get_or_insert_with(Tape::default);
    }

    /// One token: updates the state and returns the layer's output.
    pub fn step(&mut self, x: &[f32]) -> Vec<f32> {
        if let Some(t) = &mut self.tape {
            t.push(x);
        }
        let watching = self.regimes.is_some();
        let mut seen: Vec<(Regime, f32)> = Vec::new();
        let w = &self.w;
        let (h_n, dk, dv) = (w.heads, w.d_k, w.d_v);
        // Projections, then the causal depthwise convolution over the last CONV inputs + SiLU.
        let mut qkv_in = core::mem::take(&mut self.spare);
        self.packed[0].matvec_cached(x, &mut qkv_in, &mut self.first);
        // With identity taps only the projection matters, and a channel at or below −89 is
        // silu's −0 (exp(89) overflows): such channels, and ±0 ones, reach nothing (see the
        // keys below), so the heads read the projection directly and skip them.
        let identity = self.identity;
        let qkv: Vec<f32> = if identity {
            Vec::new()
        } else {
            let history = &self.conv_history;
            w.conv
                .chunks_exact(CONV)
                .zip(&qkv_in)
                .enumerate()
                .map(|(c, (taps, &now))| {
                    let past = (0..CONV - 1).fold(0.0, |acc, j| acc + taps[j] * history[j][c]);
                    silu(past + taps[CONV - 1] * now)
                })
                .collect()
        };
        let src: &[f32] = if identity { &qkv_in } else { &qkv };
        let act = |x: f32| if identity { silu(0.0 + x) } else { x };
        let product = |m: &Csc, x: &[f32]| {
            let mut y = Vec::new();
            m.matvec_into(x, &mut y);
            y
        };
        let [_, z, b, a, w_out] = &self.packed;
        let (z, b, a) = (product(z, x), product(b, x), product(a, x));
        let mut out = Vec::with_capacity(h_n * dv);
        for h in 0..h_n {
            // The machine's keys and queries are one or two entries of thousands, so each head
            // works on the nonzero ones. That gives the same bits as the dense formulas: every
            // skipped term of a sum (Σx², Sᵀk, Sᵀq) is ±0, and a sum that starts at +0 is never
            // −0, so ±0 leaves it as it is. A skipped row of S += k ⊗ δ would add ±0, which can
            // change only the sign of a zero entry, and that sign reaches nothing (every read of
            // S is one of those sums).
            let mut l2 = |v: &[f32], scale: f32| {
                let entries: Vec<(usize, f32)> = hot(v, identity).map(|(i, x)| (i, act(x))).collect();
                let ss = entries.iter().fold(0.0, |acc, &(_, x)| acc + x * x);
                if watching {
                    seen.extend(hot(v, identity).filter(|_| identity).map(|(_, x)| (Regime::SiluQkv, x)));
                    seen.push((Regime::KeyNorm, ss));
                }
                let n = rsqrt(ss + 1e-6);
                entries.into_iter().map(|(i, x)| (i, x * n * scale)).collect::<Vec<_>>()
            };
            let q = l2(&src[h * dk..(h + 1) * dk], 1.0 / (dk as f32).sqrt());
            let k = l2(&src[h_n * dk + h * dk..h_n * dk + (h + 1) * dk], 1.0);
            let v_in = &src[2 * h_n * dk + h * dv..2 * h_n * dk + (h + 1) * dv];
            let v: Vec<f32> = v_in.iter().map(|&x| act(x)).collect();
            let beta = sigmoid(b[h]);
            let softplus_at = a[h] + w.dt_bias[h];
            let gate = -w.a_log[h].exp() * softplus(softplus_at);
            let alpha = gate.exp();
            if watching {
                seen.extend(v_in.iter().filter(|_| identity).map(|&x| (Regime::SiluQkv, x)));
                seen.extend(z[h * dv..(h + 1) * dv].iter().map(|&x| (Regime::SiluZ, x)));
                // β reaches the state only through a key (with none, `S += k ⊗ δ` adds nothing).
                seen.extend((!k.is_empty()).then_some((Regime::Beta, b[h])));
                // softplus reaches α only through a nonzero `exp(a_log)`.
                seen.extend((w.a_log[h] > -110.0).then_some((Regime::Softplus, softplus_at)));
                seen.extend([(Regime::ALog, w.a_log[h]), (Regime::Gate, gate)]);
            }
            let s = &mut self.state[h * dk * dv..(h + 1) * dk * dv];
            if alpha != 1.0 {
                s.iter_mut().for_each(|x| *x *= alpha);
            }
            // kv = Sᵀk; δ = β(v − kv); S += k ⊗ δ.
            let dot =
                |s: &[f32], u: &[(usize, f32)], j: usize| u.iter().fold(0.0, |acc, &(i, u)| acc + s[i * dv + j] * u);
            let kv: Vec<f32> = (0..dv).map(|j| dot(s, &k, j)).collect();
            let delta: Vec<f32> = (0..dv).map(|j| beta * (v[j] - kv[j])).collect();
            for &(i, ki) in &k {
                for j in 0..dv {
                    s[i * dv + j] += ki * delta[j];
                }
            }
            let o: Vec<f32> = (0..dv).map(|j| dot(s, &q, j)).collect();
            // RMSNormGated: o · rsqrt(mean(o²) + ε) · w · silu(z).
            let mean = o.iter().fold(0.0, |acc, x| acc + x * x) / dv as f32 + w.eps;
            if watching {
                // With every o_j ±0 the output is ±0 whatever the root: not a step that rounds.
                seen.extend(o.iter().any(|&o| o != 0.0).then_some((Regime::OutNorm, mean)));
            }
            let n = rsqrt(mean);
            out.extend((0..dv).map(|j| o[j] * n * w.norm[j] * silu(z[h * dv + j])));
        }
        let y = product(w_out, &out);
        if let Some(r) = &mut self.regimes {
            r.count(&seen);
        }
        if identity {
            self.spare = qkv_in;
        } else {
            self.spare = self.conv_history.remove(0);
            self.conv_history.push(qkv_in);
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn value(rng: &mut Rng) -> f32 {
        match rng.next_u64() % 6 {
            0 | 1 => 0.0,
            2 => -0.0,
            3 => -89.0 - (rng.next_u64() % 3) as f32 * 0.5,
            _ => (rng.next_u64() % 2001) as f32 / 7.0 - 140.0,
        }
    }

    /// The packed products give the plain product's bits, with the first column's share kept or
    /// not: a stream of vectors whose first nonzero column and value repeat (a machine position's
    /// bias), change value, move to another column, or vanish.
    #[test]
    fn packed_products_are_the_matrix_products() {
        let mut rng = Rng::new(9);
        for _ in 0..40 {
            let (rows, cols) = (1 + (rng.next_u64() % 60) as usize, 1 + (rng.next_u64() % 50) as usize);
            let mut m = Matrix::zeros(rows, cols);
            for _ in 0..rng.next_u64() % 400 {
                let (r, c) = ((rng.next_u64() % rows as u64) as usize, (rng.next_u64() % cols as u64) as usize);
                m.set(r, c, value(&mut rng));
            }
            let packed = Csc::new(&m);
            let mut cache = FirstColumn::default();
            let mut first = (0, 1.5f32);
            for _ in 0..30 {
                let mut x: Vec<f32> =
                    (0..cols).map(|_| if rng.next_u64().is_multiple_of(3) { value(&mut rng) } else { 0.0 }).collect();
                match rng.next_u64() % 4 {
                    0 => first = ((rng.next_u64() % cols as u64) as usize, value(&mut rng)),
                    1 => x.iter_mut().for_each(|v| *v = 0.0),
                    _ => {}
                }
                x[..first.0].iter_mut().for_each(|v| *v = 0.0);
                x[first.0] = first.1;
                let want: Vec<u32> = m.matvec(&x).iter().map(|v| v.to_bits()).collect();
                let (mut plain, mut cached) = (Vec::new(), Vec::new());
                packed.matvec_into(&x, &mut plain);
                packed.matvec_cached(&x, &mut cached, &mut cache);
                assert_eq!(want, plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                assert_eq!(want, cached.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            }
        }
    }

    /// The chunked scan finds the entries the plain filter finds, in order, for lengths that are
    /// and are not multiples of its chunk.
    #[test]
    fn hot_entries_are_the_filters() {
        let mut rng = Rng::new(3);
        for len in 0..70 {
            let v: Vec<f32> =
                (0..len).map(|_| if rng.next_u64().is_multiple_of(9) { value(&mut rng) } else { 0.0 }).collect();
            for identity in [false, true] {
                let skip = |x: f32| x == 0.0 || (identity && x <= -89.0);
                let want: Vec<(usize, u32)> =
                    v.iter().enumerate().filter(|(_, &x)| !skip(x)).map(|(i, x)| (i, x.to_bits())).collect();
                let got: Vec<(usize, u32)> = hot(&v, identity).map(|(i, x)| (i, x.to_bits())).collect();
                assert_eq!(want, got, "{v:?}");
            }
        }
    }
}
