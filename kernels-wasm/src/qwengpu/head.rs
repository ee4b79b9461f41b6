//! A Gated DeltaNet head of the compiled machine (see `net`): state rows that hold words, written
//! and read through Qwen3.5's own formulas with weights chosen so that every step is exact
//! (`memory` gives the argument).

use super::alu::A;
use super::deltanet::{DeltaNet, CONV};
use super::memory::M;
use super::net::{silu, State, Stream, StreamError};
use alloc::vec;
use alloc::vec::Vec;

/// The smallest power of 4 that holds `n` rows: a head's `d_k` (so that `1/sqrt(d_k)` is exact).
pub fn rows_for(n: usize) -> usize {
    let mut p = 1;
    while p < n {
        p *= 4;
    }
    p
}

/// Per group read by a layer, per channel of it, the (target, weight) pairs of its column.
type Columns = Vec<(usize, Vec<Vec<(u32, f32)>>)>;

fn add_column(cols: &mut Columns, s: &Stream, ch: usize, target: u32, w: f32) {
    let g = s.group_of[ch] as usize;
    let (_, at, len) = s.groups[g];
    let i = match cols.binary_search_by_key(&g, |c| c.0) {
        Ok(i) => i,
        Err(i) => {
            cols.insert(i, (g, vec![Vec::new(); len]));
            i
        }
    };
    cols[i].1[ch - at].push((target, w));
}

/// Files channel `chans[i]` under row (or value channel) `i`, with weight M.
fn file(cols: &mut Columns, s: &Stream, chans: &[usize]) {
    for (i, &ch) in chans.iter().enumerate() {
        add_column(cols, s, ch, i as u32, M);
    }
}

/// A Gated DeltaNet head holding words in its state rows. Each row is written by a hot channel
/// of `key` and read by one of `query`; `value` channels are the word's, and the word read is
/// added onto `out` (channel j of the row onto `out[j]`, which must be cold).
#[derive(Debug, Clone)]
pub struct MemLayer {
    pub d_k: usize,
    pub d_v: usize,
    /// Hot channels in a stored row (the same for every row, so RMSNormGated scales exactly).
    pub hot: usize,
    key: Columns,
    query: Columns,
    value: Columns,
    out: Vec<usize>,
    norm: f32,
    pub state: Vec<f32>,
    /// The decay `α = exp(−exp(A_log)·softplus(a + dt_bias))` with `A_log = −1000`, `a = 0`: a
    /// constant of the weights (1).
    alpha: f32,
    scratch: Vec<f32>,
}

impl MemLayer {
    /// `query[i]`/`key[i]` address row i; `value[j]` and `out[j]` are channel j of a row.
    /// `d_k` must be a power of 4 and `d_v / hot` a power of 4, so that every scale is exact.
    pub fn new(
        s: &Stream,
        d_k: usize,
        query: &[usize],
        key: &[usize],
        value: &[usize],
        out: &[usize],
        hot: usize,
    ) -> MemLayer {
        let pow4 = |n: usize| n.is_power_of_two() && n.trailing_zeros().is_multiple_of(2);
        let d_v = value.len();
        assert!(pow4(d_k) && query.len() <= d_k && key.len() == query.len(), "d_k {d_k}");
        assert!(d_v.is_multiple_of(hot) && pow4(d_v / hot) && out.len() == d_v, "d_v {d_v}, {hot} hot");
        let cols = |chans: &[usize]| {
            let mut c = Columns::new();
            file(&mut c, s, chans);
            c
        };
        // A read row normalises to sqrt(d_v/hot) on its hot channels; silu(z) = 32.
        let norm = 1.0 / (32.0 * ((d_v / hot) as f32).sqrt());
        MemLayer {
            d_k,
            d_v,
            hot,
            key: cols(key),
            query: cols(query),
            value: cols(value),
            out: out.to_vec(),
            norm,
            state: vec![0.0; d_k * d_v],
            alpha: (-(-1000.0f32).exp() * 2.0f32.ln()).exp(),
            scratch: Vec::new(),
        }
    }

    /// A second set of query channels for the same rows (`chans[i]` reads row i).
    pub fn with_query(mut self, s: &Stream, chans: &[usize]) -> MemLayer {
        file(&mut self.query, s, chans);
        self
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.state[i * self.d_v..(i + 1) * self.d_v]
    }

    /// The hot entries of a projection: `(M/2)·(n+1)` is M on hot channels, 0 on cold ones.
    fn hot_entries(cols: &Columns, st: &State) -> Vec<(usize, f32)> {
        let mut v = Vec::new();
        for (g, chans) in cols {
            if let Some(h) = st.hot[*g] {
                v.extend(chans[h as usize].iter().map(|&(i, w)| (i as usize, w)));
            }
        }
        v
    }

    pub fn forward(&mut self, s: &Stream, st: &mut State, layer: usize) -> Result<(), StreamError> {
        let l2 = |v: &mut Vec<(usize, f32)>, scale: f32| {
            for e in v.iter_mut() {
                e.1 = silu(e.1);
            }
            let n = 1.0 / (v.iter().fold(0.0, |a, e| a + e.1 * e.1) + 1e-6).sqrt();
            for e in v.iter_mut() {
                e.1 = e.1 * n * scale;
            }
        };
        let (dv, scale) = (self.d_v, 1.0 / (self.d_k as f32).sqrt());
        let mut k = Self::hot_entries(&self.key, st);
        let mut q = Self::hot_entries(&self.query, st);
        // No key and no query: with α = 1 the state stays as it is (k = 0 adds k ⊗ δ = 0) and
        // o = Sᵀ·0 = 0 gives a zero output, so there is nothing to compute.
        if k.is_empty() && q.is_empty() && self.alpha == 1.0 {
            return Ok(());
        }
        l2(&mut k, 1.0);
        l2(&mut q, scale);
        // β = sigmoid(32) = 1 and α = exp(−exp(−1000)·softplus(0)) = 1, as `memory` sets them.
        let beta = 1.0 / (1.0 + (-32.0f32).exp());
        let alpha = self.alpha;
        if alpha != 1.0 {
            self.state.iter_mut().for_each(|x| *x *= alpha);
        }
        // Scratch vectors v, Sᵀk and o (reused: no allocation per token).
        let mut scratch = core::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(3 * dv, 0.0);
        let (v, rest) = scratch.split_at_mut(dv);
        let (kv, o) = rest.split_at_mut(dv);
        // No key: k ⊗ δ = 0 leaves the state as it is.
        if !k.is_empty() {
            for (j, m) in Self::hot_entries(&self.value, st) {
                v[j] = silu(m);
            }
            for &(i, ki) in &k {
                for (acc, s) in kv.iter_mut().zip(&self.state[i * dv..(i + 1) * dv]) {
                    *acc += s * ki;
                }
            }
            for &(i, ki) in &k {
                for j in 0..dv {
                    self.state[i * dv + j] += ki * (beta * (v[j] - kv[j]));
                }
            }
        }
        for &(i, qi) in &q {
            for (acc, s) in o.iter_mut().zip(&self.state[i * dv..(i + 1) * dv]) {
                *acc += s * qi;
            }
        }
        // No query: o = 0 and every output is 0.
        let mut result = Ok(());
        if !q.is_empty() {
            let r = 1.0 / (o.iter().fold(0.0, |a, x| a + x * x) / dv as f32 + 1e-6).sqrt();
            let gate = silu(32.0);
            for (j, &oj) in o.iter().enumerate() {
                let y = oj * r * self.norm * gate;
                if y != 0.0 && result.is_ok() {
                    result = st.write(s, self.out[j], 2.0 * A * y, layer);
                }
            }
        }
        self.scratch = scratch;
        result
    }

    /// The same head as a dense `DeltaNet` (for tests on small streams).
    pub fn dense(&self, s: &Stream) -> DeltaNet {
        let (d, dk, dv) = (s.d, self.d_k, self.d_v);
        let mut w_qkv = vec![0.0; (2 * dk + dv) * d];
        let mut place = |cols: &Columns, first: usize| {
            for (g, chans) in cols {
                for (c, col) in chans.iter().enumerate() {
                    for &(i, _) in col {
                        let row = (first + i as usize) * d;
                        w_qkv[row + s.groups[*g].1 + c] = M / 2.0;
                        w_qkv[row + Stream::ONE] = M / 2.0;
                    }
                }
            }
        };
        place(&self.query, 0);
        place(&self.key, dk);
        place(&self.value, 2 * dk);
        let mut w_out = vec![0.0; d * dv];
        for (j, &c) in self.out.iter().enumerate() {
            w_out[c * dv + j] = 2.0 * A;
        }
        let mut net =
            DeltaNet::new(super::memory::exact_weights_sized(d, Stream::ONE, dk, dv, self.norm, w_qkv, w_out));
        net.state.copy_from_slice(&self.state);
        net
    }

    /// Nonzero weights: q, k and v rows (their channel and the constant), z, b, the conv taps,
    /// the norm and out_proj.
    pub fn nonzero(&self) -> usize {
        let entries = |c: &Columns| c.iter().map(|(_, ch)| ch.iter().map(Vec::len).sum::<usize>()).sum::<usize>();
        2 * (entries(&self.query) + entries(&self.key) + entries(&self.value))
            + self.d_v
            + 1
            + 2 * self.d_k
            + self.d_v
            + self.d_v
            + self.out.len()
    }

    /// Parameters of the head as Qwen3.5 stores them (dense; u64: more than 2^32 on wasm32).
    pub fn parameters(&self, d_model: usize) -> u64 {
        let (d, dk, dv) = (d_model as u64, self.d_k as u64, self.d_v as u64);
        (2 * dk + dv) * d + dv * d + 2 * d + 2 + (2 * dk + dv) * CONV as u64 + dv + d * dv
    }
}
