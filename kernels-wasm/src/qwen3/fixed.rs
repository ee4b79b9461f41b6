//! The integer arithmetic of qwen3-ebpf (FACTS §1), the golden model the BPF programs must match
//! bit for bit. Activations are Q16 in i32, matrix weights Q24, norm scales Q20; every shift is
//! arithmetic (floor), as C's `>>` on signed values is with clang on BPF and x86.
//!
//! Each function is the whole definition of one operator, written once here and, in C, once in
//! `native-host/bpf/`; tests compare the two and, for accuracy, each against f64.

/// Fractional bits of activations, matrix weights and norm scales.
pub const Q_ACT: u32 = 16;
pub const Q_W: u32 = 24;
pub const Q_NORM: u32 = 20;
/// Qwen3's `rms_norm_eps` (1e-6) in Q32, added to the mean square before the square root.
pub const EPS_Q32: u64 = 4295;
/// 1/√128 in Q16: the attention score scale for head_dim 128 (the seed's constant).
pub const INV_SQRT_128_Q16: i64 = 5793;

/// `rms_norm_eps` in Q32 (rounded): 1e-6 gives the seed's 4295.
pub fn eps_q32(eps: f64) -> u64 {
    let v = eps * 4_294_967_296.0 + 0.5;
    if v.is_finite() && v >= 0.0 {
        v as u64
    } else {
        0
    }
}

/// 1/√head_dim in Q16 (rounded): 5793 for 128 (the seed's constant), 8192 for 64.
pub fn score_scale_q16(head_dim: usize) -> i64 {
    // round(√y) = ⌊(⌊√(4y)⌋ + 1) / 2⌋ with y = 2^32 / head_dim: exact integers, no libm in no_std.
    let four_y = (1u64 << 34) / head_dim.max(1) as u64;
    four_y.isqrt().div_ceil(2) as i64
}

/// A value that does not fit its fixed-point format.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("value {value} at index {index} is not finite or does not fit Q{bits} in 32 bits")]
pub struct OutOfRange {
    pub index: usize,
    pub value: f64,
    pub bits: u32,
}

/// `v · 2^bits` rounded half away from zero, as C's `round((double)v * 2^n)` (no `+0.5` trick,
/// which is wrong just below one half; and no `floor`, which `no_std` lacks).
pub fn to_fixed(v: f64, bits: u32, index: usize) -> Result<i32, OutOfRange> {
    let scaled = v * (1u64 << bits) as f64;
    let err = OutOfRange { index, value: v, bits };
    if !scaled.is_finite() || scaled.abs() > 4_294_967_296.0 {
        return Err(err);
    }
    let whole = scaled as i64; // toward zero; exact here
    let frac = scaled - whole as f64; // exact for |scaled| < 2^52
    let rounded = whole + (frac >= 0.5) as i64 - (frac <= -0.5) as i64;
    i32::try_from(rounded).map_err(|_| err)
}

/// Converts a whole tensor, naming the first value that does not fit.
pub fn tensor_to_fixed(values: &[f32], bits: u32) -> Result<alloc::vec::Vec<i32>, OutOfRange> {
    values.iter().enumerate().map(|(i, &v)| to_fixed(v as f64, bits, i)).collect()
}

/// One output of a matrix-vector product: `(Σ x_q16 · w_q24) >> 24` in i64, kept in Q16.
#[inline]
pub fn dot_row(x: &[i32], w: &[i32]) -> i32 {
    let sum: i64 = x.iter().zip(w).map(|(&a, &b)| a as i64 * b as i64).sum();
    (sum >> Q_W) as i32
}

/// `y = W·x` for a row-major `rows × x.len()` Q24 matrix, and the index of the largest output
/// (strict `>`, so ties keep the lowest index).
pub fn matvec(w: &[i32], x: &[i32], y: &mut [i32]) -> usize {
    let (mut best, mut best_val) = (0, i32::MIN);
    for (r, out) in y.iter_mut().enumerate() {
        *out = dot_row(x, &w[r * x.len()..(r + 1) * x.len()]);
        if r == 0 || *out > best_val {
            (best, best_val) = (r, *out);
        }
    }
    best
}

/// `(a · b) >> 16` in i64: the product of two Q16 values.
#[inline]
pub fn mul_q16(a: i32, b: i32) -> i32 {
    ((a as i64 * b as i64) >> Q_ACT) as i32
}

/// Integer square root by Newton's method: 24 steps from 2^20, the low bit forced to 1 after each
/// step (so the root never reaches 0). Exact enough for the Q32 mean squares RMSNorm takes.
pub fn isqrt(v: u64) -> u64 {
    let mut root: u64 = 1 << 20;
    for _ in 0..24 {
        root = (root + v / root) >> 1;
        root |= 1;
    }
    root
}

/// RMSNorm of a Q16 vector with Q20 scales: mean square in Q32 (+ eps), its root in Q16, the
/// inverse `2^32 / root` in Q16, then `(((x · inv) >> 16) · w) >> 20` (Qwen3 scales by `w`).
/// `eps` is the model's epsilon in Q32 ([`eps_q32`]).
pub fn rms_norm(x: &[i32], w_q20: &[i32], eps: u64, y: &mut [i32]) {
    let sum: u64 = x.iter().map(|&v| (v as i64 * v as i64) as u64).sum();
    let mean = sum / x.len().max(1) as u64 + eps;
    let inv = (1u64 << 32) / isqrt(mean);
    for ((out, &v), &w) in y.iter_mut().zip(x).zip(w_q20) {
        let normed = (v as i64 * inv as i64) >> Q_ACT;
        *out = ((normed * w as i64) >> Q_NORM) as i32;
    }
}

/// `e^(−d)` for a Q16 `d ≥ 0`, in Q32: `(1 − d/1024)^1024` by ten squarings; exactly 2^32 at 0
/// and 0 from 16.0 on.
pub fn exp_neg(d: i64) -> u64 {
    if d <= 0 {
        return 1 << 32;
    }
    if d >= 16 << Q_ACT {
        return 0;
    }
    // d < 2^20, so d << 6 < 2^26 < 2^32, and r < 2^32 keeps r·r below 2^64.
    let mut r: u64 = (1u64 << 32) - ((d as u64) << 6);
    for _ in 0..10 {
        r = (r * r) >> 32;
    }
    r
}

/// SiLU of a Q16 value: `x · sigmoid(x)` with the sigmoid in Q16 from [`exp_neg`].
pub fn silu(x: i32) -> i32 {
    if x >= 16 << Q_ACT {
        return x;
    }
    if x <= -(16 << Q_ACT) {
        return 0;
    }
    let e = exp_neg((x as i64).abs());
    let sigmoid = if x >= 0 { (1u64 << 48) / ((1u64 << 32) + e) } else { (e << 16) / ((1u64 << 32) + e) };
    ((x as i64 * sigmoid as i64) >> Q_ACT) as i32
}

/// Rotates the pairs `(i, i + half)` of one head by the host's Q20 cos/sin for its position.
pub fn rope(head: &mut [i32], cos_q20: &[i32], sin_q20: &[i32]) {
    let half = head.len() / 2;
    for i in 0..half {
        let (a, b) = (head[i] as i64, head[i + half] as i64);
        let (c, s) = (cos_q20[i] as i64, sin_q20[i] as i64);
        head[i] = ((a * c - b * s) >> Q_NORM) as i32;
        head[i + half] = ((b * c + a * s) >> Q_NORM) as i32;
    }
}

/// The attention score of a query and a key (Q16): `((Σ q·k) >> 16) · scale >> 16`, `scale`
/// being 1/√head_dim in Q16 ([`score_scale_q16`]; 5793 for Qwen3's 128).
pub fn score(q: &[i32], k: &[i32], scale_q16: i64) -> i32 {
    let dot: i64 = q.iter().zip(k).map(|(&a, &b)| a as i64 * b as i64).sum();
    (((dot >> Q_ACT) * scale_q16) >> Q_ACT) as i32
}

/// Online softmax over positions, as a running weighted mean: `out` is always the softmax-weighted
/// average of the values seen so far and `mass` their total weight in Q16, relative to the running
/// maximum score `max`. A new value `v` of weight `w` moves `out` by `(v − out) · w / mass` (that
/// fraction in Q24). Everything fits 64 bits — BPF has no wider type: weights ≤ 2^16, mass ≤
/// positions · 2^16, `mass · weight` < 2^64 for any context below 2^32 positions.
#[derive(Debug, Clone, PartialEq)]
pub struct OnlineSoftmax {
    pub max: i32,
    pub mass: u64,
    pub out: alloc::vec::Vec<i32>,
}

impl OnlineSoftmax {
    pub fn new(dim: usize) -> Self {
        OnlineSoftmax { max: i32::MIN, mass: 0, out: alloc::vec![0; dim] }
    }

    pub fn push(&mut self, s: i32, v: &[i32]) {
        let weight = if self.mass == 0 {
            self.max = s;
            1u64 << 16
        } else if s > self.max {
            // Everything seen so far shrinks by e^(max − s); the new position has weight 1.
            self.mass = (self.mass * (exp_neg(s as i64 - self.max as i64) >> 16)) >> 16;
            self.max = s;
            1u64 << 16
        } else {
            exp_neg(self.max as i64 - s as i64) >> 16
        };
        self.mass += weight;
        let alpha = ((weight << 24) / self.mass) as i64; // ≤ 2^24
        for (o, &x) in self.out.iter_mut().zip(v) {
            *o += (((x as i64 - *o as i64) * alpha) >> 24) as i32;
        }
    }
}

/// The largest head dimension the kernels take (Qwen3's; llama-family models use 64).
pub const MAX_HEAD_DIM: usize = 128;

/// RMSNorm of each of `segments` equal parts of `x` (QK-norm: one per head) with the same
/// `len`-long Q20 scales; `segments = 1` is the ordinary RMSNorm.
pub fn rms_norm_segments(x: &mut [i32], w_q20: &[i32], segments: usize, eps: u64) {
    let len = x.len() / segments.max(1);
    for seg in x.chunks_exact_mut(len) {
        let input = seg.to_vec();
        rms_norm(&input, &w_q20[..len], eps, seg);
    }
}

/// The head layout of attention: query and KV heads and their width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub dim: usize,
}

/// Causal attention of one token, as the BPF program computes it: query heads `q`
/// (`heads × dim`), and for every position `0..=pos` its cached keys and values (`keys(p, kvh)`,
/// `values(p, kvh)`, `dim` each). Query head `h` reads KV head `h / (heads / kv_heads)` (GQA).
pub fn attention<'a>(
    q: &[i32],
    shape: Heads,
    positions: usize,
    keys: impl Fn(usize, usize) -> &'a [i32],
    values: impl Fn(usize, usize) -> &'a [i32],
    out: &mut [i32],
) {
    let Heads { heads, kv_heads, dim } = shape;
    let group = heads / kv_heads.max(1);
    let scale = score_scale_q16(dim);
    for h in 0..heads {
        let qh = &q[h * dim..(h + 1) * dim];
        let mut sm = OnlineSoftmax::new(dim);
        for p in 0..positions {
            sm.push(score(qh, keys(p, h / group), scale), values(p, h / group));
        }
        out[h * dim..(h + 1) * dim].copy_from_slice(&sm.out);
    }
}

/// `a = silu(a) · b` (Q16): SwiGLU's gate times up.
pub fn silu_mul(a: &mut [i32], b: &[i32]) {
    for (x, &y) in a.iter_mut().zip(b) {
        *x = mul_q16(silu(*x), y);
    }
}

/// `a += b`, wrapping like C's s32 addition on two's-complement machines.
pub fn add(a: &mut [i32], b: &[i32]) {
    for (x, &y) in a.iter_mut().zip(b) {
        *x = x.wrapping_add(y);
    }
}

#[cfg(test)]
mod tests;
