//! The machine's memory as a Gated DeltaNet layer (`deltanet`) whose weights are computed, not
//! learned: each state row is one 32-bit word, and every step can write one word and read one
//! word back, exactly, through Qwen3.5's own nonlinearities in f32.
//!
//! The encoding, and why every operation on it is exact in f32:
//! - A word is 8 nibbles, each one-hot over 16 channels: `d_v = 128` channels with exactly 8 of
//!   them `M = 4096`, the rest 0. Every value in play is 0 or a power of two or an integer below
//!   2^24, so products and sums are exact.
//! - Keys and queries are one-hot rows scaled by `M` before the convolution (identity taps
//!   `[0, 0, 0, 1]`: `0·x + … + 1·x` is exact) and SiLU (`silu(4096) = 4096` because
//!   `sigmoid(4096)` rounds to 1; `silu(0) = 0`). The L2 norm divides by `sqrt(M² + 1e-6)`: `M²
//!   = 2^24`, the 1e-6 is lost in rounding, so `k = e_i` exactly; `q = e_i / sqrt(256) = e_i/16`,
//!   a power of two (`d_k = 256` rows).
//! - Writes: `β = sigmoid(32) = 1`, and `α = exp(−exp(−1000)·softplus(0)) = exp(−0) = 1`, so the
//!   delta rule `S += k ⊗ (v − Sᵀk)` replaces row i by `v` exactly. No write: `k = 0`, whose L2
//!   norm is `0 · 1000 = 0`, leaves every row as it was.
//! - Reads: `o = Sᵀq = row/16`, entries 0 or 256. RMSNormGated divides by the root mean square,
//!   which the one-hot code makes the same for every word (8 entries of 256 in 128:
//!   `mean(o²) = 4096`, plus ε lost in rounding, `rsqrt = 1/64`); then `w = 1/128` and
//!   `silu(z) = silu(32) = 32` bring each hot entry to exactly 1. An unwritten row reads as 0.
//! - `out_proj` sums `digit · 16^k` into the word's low and high halves (each < 2^16).

use super::deltanet::{DeltaNet, DeltaNetWeights, Matrix, CONV};
use alloc::vec;
use alloc::vec::Vec;

/// State rows (words) of the memory head.
pub const ROWS: usize = 256;
/// Channels of a word: 8 nibbles × 16.
pub const WORD: usize = 128;
/// The magnitude of a hot key, query or value channel.
pub const M: f32 = 4096.0;

/// Where each part of the input sits: write address (one-hot), value (one-hot nibbles), read
/// address (one-hot), constant 1.
pub const WRITE: usize = 0;
pub const VALUE: usize = ROWS;
pub const READ: usize = ROWS + WORD;
pub const ONE: usize = 2 * ROWS + WORD;
pub const D_MODEL: usize = ONE + 1;

/// A word as one-hot nibbles (values 0/1).
pub fn encode(word: u32) -> [f32; WORD] {
    let mut v = [0.0; WORD];
    for k in 0..8 {
        v[16 * k + ((word >> (4 * k)) & 15) as usize] = 1.0;
    }
    v
}

/// The word a state row holds, if it holds exactly one hot channel per nibble.
pub fn decode_row(row: &[f32], hot: f32) -> Option<u32> {
    let mut word = 0u32;
    for k in 0..8 {
        let nibble = &row[16 * k..16 * k + 16];
        let hits: Vec<usize> = (0..16).filter(|&d| nibble[d] == hot).collect();
        if hits.len() != 1 || nibble.iter().any(|&x| x != 0.0 && x != hot) {
            return None;
        }
        word |= (hits[0] as u32) << (4 * k);
    }
    Some(word)
}

/// A one-head memory layer over a `d_model`-wide input with constant channel `one` (its value
/// normalised to 1): the given q|k|v and output projections, and everything else set as the
/// encoding above needs — identity convolution taps, `silu(z) = 32`, `β = 1`, `α = 1`, RMSNormGated
/// scale 1/128.
pub fn exact_weights(d_model: usize, one: usize, w_qkv: Matrix, w_out: Matrix) -> DeltaNetWeights {
    exact_weights_sized(d_model, one, (1, ROWS, WORD), 1.0 / 128.0, w_qkv, w_out)
}

/// [`exact_weights`] for `heads` heads of `d_k` rows of `d_v` channels each, with RMSNormGated
/// scale `norm` (every head set alike).
pub fn exact_weights_sized(
    d_model: usize,
    one: usize,
    (heads, dk, dv): (usize, usize, usize),
    norm: f32,
    w_qkv: Matrix,
    w_out: Matrix,
) -> DeltaNetWeights {
    let channels = heads * (2 * dk + dv);
    let mut conv = vec![0.0; channels * CONV];
    for c in 0..channels {
        conv[c * CONV + CONV - 1] = 1.0;
    }
    let mut w_z = Matrix::zeros(heads * dv, d_model);
    for j in 0..heads * dv {
        w_z.set(j, one, 32.0);
    }
    let mut w_b = Matrix::zeros(heads, d_model);
    for h in 0..heads {
        w_b.set(h, one, 32.0);
    }
    DeltaNetWeights {
        d_model,
        heads,
        d_k: dk,
        d_v: dv,
        w_qkv,
        w_z,
        w_b,
        w_a: Matrix::zeros(heads, d_model),
        a_log: vec![-1000.0; heads],
        dt_bias: vec![0.0; heads],
        conv,
        norm: vec![norm; dv],
        eps: 1e-6,
        w_out,
    }
}

/// The memory layer's weights.
pub fn weights() -> DeltaNetWeights {
    let (dk, dv) = (ROWS, WORD);
    let mut w_qkv = Matrix::zeros(2 * dk + dv, D_MODEL);
    for i in 0..dk {
        w_qkv.set(i, READ + i, M); // q
        w_qkv.set(dk + i, WRITE + i, M); // k
    }
    for j in 0..dv {
        w_qkv.set(2 * dk + j, VALUE + j, M); // v
    }
    // The word's halves: Σ digit · 16^k over nibbles 0–3 and 4–7.
    let mut w_out = Matrix::zeros(2, dv);
    for k in 0..8 {
        for d in 0..16 {
            w_out.set(k / 4, 16 * k + d, (d as f32) * 16f32.powi((k % 4) as i32));
        }
    }
    exact_weights(D_MODEL, ONE, w_qkv, w_out)
}

/// One step's input: write `value` at `write` (if any), then read `read` (if any).
pub fn input(write: Option<(usize, u32)>, read: Option<usize>) -> Vec<f32> {
    let mut x = vec![0.0; D_MODEL];
    if let Some((at, value)) = write {
        x[WRITE + at] = 1.0;
        x[VALUE..VALUE + WORD].copy_from_slice(&encode(value));
    }
    if let Some(at) = read {
        x[READ + at] = 1.0;
    }
    x[ONE] = 1.0;
    x
}

/// The word an output carries (`None` unless both halves are integers below 2^16).
pub fn output_word(y: &[f32]) -> Option<u32> {
    let half = |v: f32| ((0.0..65536.0).contains(&v) && v.fract() == 0.0).then_some(v as u32);
    Some(half(y[0])? | half(y[1])? << 16)
}

/// A memory of `ROWS` words in a DeltaNet layer.
pub fn layer() -> DeltaNet {
    DeltaNet::new(weights())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Thousands of random writes and reads through the real layer against a plain array, with
    /// every state row decoded after every step: bit-exact throughout.
    #[test]
    fn the_deltanet_layer_is_an_exact_memory() {
        let mut mem = layer();
        let mut plain = [None::<u32>; ROWS];
        let mut rng = Rng::new(77);
        let words = 126;
        for step in 0..1500 {
            let write =
                (!rng.next_u64().is_multiple_of(3)).then(|| ((rng.next_u64() % words) as usize, rng.next_u64() as u32));
            let read = (!rng.next_u64().is_multiple_of(4)).then(|| (rng.next_u64() % words) as usize);
            let y = mem.step(&input(write, read));
            if let Some((at, v)) = write {
                plain[at] = Some(v);
            }
            let want = read.map(|r| plain[r].unwrap_or(0)).unwrap_or(0);
            assert_eq!(output_word(&y), Some(want), "step {step}: read {read:?} after write {write:?}");
            if step % 97 == 0 {
                for (i, p) in plain.iter().enumerate() {
                    let row = decode_row(mem.row(0, i), M);
                    match p {
                        Some(v) => assert_eq!(row, Some(*v), "step {step}: row {i}"),
                        None => {
                            assert!(mem.row(0, i).iter().all(|&x| x == 0.0), "step {step}: row {i} was never written")
                        }
                    }
                }
            }
        }
        assert_eq!(mem.weights().parameters(), weights().parameters());
    }
}
