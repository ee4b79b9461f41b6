//! A Gated DeltaNet head of the compiled machine (see `net`): state rows that hold words, written
//! and read through Qwen3.5's own formulas with weights chosen so that every step is exact
//! (`memory` gives the argument).

use super::alu::A;
use super::deltanet::{DeltaNet, Matrix, CONV};
use super::memory::M;
use super::net::{silu, Place, State, Stream, StreamError};
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
pub(crate) type Columns = Vec<(usize, Vec<Vec<(u32, f32)>>)>;

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
    pub(crate) key: Columns,
    pub(crate) query: Columns,
    pub(crate) value: Columns,
    pub(crate) out: Vec<Place>,
    pub(crate) norm: f32,
    pub state: Vec<f32>,
    /// The decay `α = exp(−exp(A_log)·softplus(a + dt_bias))` with `A_log = −1000`, `a = 0`: a
    /// constant of the weights (1).
    pub(crate) alpha: f32,
    scratch: Scratch,
}

/// Per-token buffers, reused: the hot entries of k, q and v, the vectors v, Sᵀk and o, and o's
/// nonzero entries.
#[derive(Debug, Clone, Default)]
struct Scratch {
    k: Vec<(usize, f32)>,
    q: Vec<(usize, f32)>,
    e: Vec<(usize, f32)>,
    v: Vec<f32>,
    kv: Vec<f32>,
    o: Vec<f32>,
    nz: Vec<u32>,
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
            out: out.iter().map(|&c| Place::of(s, c)).collect(),
            norm,
            state: vec![0.0; d_k * d_v],
            alpha: (-(-1000.0f32).exp() * 2.0f32.ln()).exp(),
            scratch: Scratch::default(),
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
    fn hot_entries(cols: &Columns, st: &State, v: &mut Vec<(usize, f32)>) {
        v.clear();
        for (g, chans) in cols {
            if let Some(h) = st.hot[*g] {
                v.extend(chans[h as usize].iter().map(|&(i, w)| (i as usize, w)));
            }
        }
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
        let mut sc = core::mem::take(&mut self.scratch);
        Self::hot_entries(&self.key, st, &mut sc.k);
        Self::hot_entries(&self.query, st, &mut sc.q);
        // No key and no query: with α = 1 the state stays as it is (k = 0 adds k ⊗ δ = 0) and
        // o = Sᵀ·0 = 0 gives a zero output, so there is nothing to compute.
        if sc.k.is_empty() && sc.q.is_empty() && self.alpha == 1.0 {
            self.scratch = sc;
            return Ok(());
        }
        l2(&mut sc.k, 1.0);
        l2(&mut sc.q, scale);
        // β = sigmoid(32) = 1 and α = exp(−exp(−1000)·softplus(0)) = 1, as `memory` sets them.
        let beta = 1.0 / (1.0 + (-32.0f32).exp());
        let alpha = self.alpha;
        if alpha != 1.0 {
            self.state.iter_mut().for_each(|x| *x *= alpha);
        }
        // No key: k ⊗ δ = 0 leaves the state as it is.
        if !sc.k.is_empty() {
            Self::hot_entries(&self.value, st, &mut sc.e);
            sc.v.clear();
            sc.v.resize(dv, 0.0);
            for &(j, m) in &sc.e {
                sc.v[j] = silu(m);
            }
            sc.kv.clear();
            sc.kv.resize(dv, 0.0);
            for &(i, ki) in &sc.k {
                for (acc, s) in sc.kv.iter_mut().zip(&self.state[i * dv..(i + 1) * dv]) {
                    *acc += s * ki;
                }
            }
            for &(i, ki) in &sc.k {
                let row = &mut self.state[i * dv..(i + 1) * dv];
                for ((s, v), kv) in row.iter_mut().zip(&sc.v).zip(&sc.kv) {
                    *s += ki * (beta * (v - kv));
                }
            }
        }
        // No query: o = 0 and every output is 0.
        let mut result = Ok(());
        if let Some((&(i0, q0), rest)) = sc.q.split_first() {
            // o = Σ qᵢ·Sᵢ, the first term assigned rather than added to zeros: that differs
            // only where the product is −0 (o = −0 for +0), and a zero of either sign is skipped
            // below, so nothing downstream changes.
            sc.o.clear();
            sc.o.extend(self.state[i0 * dv..(i0 + 1) * dv].iter().map(|s| s * q0));
            for &(i, qi) in rest {
                for (acc, s) in sc.o.iter_mut().zip(&self.state[i * dv..(i + 1) * dv]) {
                    *acc += s * qi;
                }
            }
            // The row's nonzero entries, in order: a zero adds +0 to the (non-negative) sum of
            // squares and gives y = 0, no write, so visiting only these is the same arithmetic.
            sc.nz.clear();
            for (c, chunk) in sc.o.chunks(32).enumerate() {
                let mut bits = chunk.iter().enumerate().fold(0u32, |m, (j, &x)| m | u32::from(x != 0.0) << j);
                while bits != 0 {
                    sc.nz.push(32 * c as u32 + bits.trailing_zeros());
                    bits &= bits - 1;
                }
            }
            let ss = sc.nz.iter().fold(0.0, |a, &j| a + sc.o[j as usize] * sc.o[j as usize]);
            let r = 1.0 / (ss / dv as f32 + 1e-6).sqrt();
            let gate = silu(32.0);
            for &j in &sc.nz {
                let y = sc.o[j as usize] * r * self.norm * gate;
                if y != 0.0 && result.is_ok() {
                    result = st.write(s, self.out[j as usize], 2.0 * A * y, layer);
                }
            }
        }
        self.scratch = sc;
        result
    }

    /// The same head as a dense `DeltaNet` (for tests on small streams).
    pub fn dense(&self, s: &Stream) -> DeltaNet {
        let (d, dk, dv) = (s.d, self.d_k, self.d_v);
        let mut w_qkv = Matrix::zeros(2 * dk + dv, d);
        let mut place = |cols: &Columns, first: usize| {
            for (g, chans) in cols {
                for (c, col) in chans.iter().enumerate() {
                    for &(i, _) in col {
                        let row = first + i as usize;
                        w_qkv.set(row, s.groups[*g].1 + c, M / 2.0);
                        w_qkv.set(row, Stream::ONE, M / 2.0);
                    }
                }
            }
        };
        place(&self.query, 0);
        place(&self.key, dk);
        place(&self.value, 2 * dk);
        let mut w_out = Matrix::zeros(d, dv);
        for (j, c) in self.out.iter().enumerate() {
            w_out.set(c.ch as usize, j, 2.0 * A);
        }
        let mut net =
            DeltaNet::new(super::memory::exact_weights_sized(d, Stream::ONE, (1, dk, dv), self.norm, w_qkv, w_out));
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
