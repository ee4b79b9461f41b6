//! The second machine's value tokens (issue #22; `docs/qwengpu-second-machine.md` §1): a 16-bit
//! value that one machine step writes and a later step reads travels as one of 65,536 VAL
//! tokens, sampled by the model's own argmax. This is both ends of that hop in the text model's
//! arithmetic: an embedding row per VAL token, and the unembedding rows whose argmax gives the
//! token back.
//!
//! **The embedding.** VAL token `v` writes `v`'s two 8-bit limbs `(l, h)` into two limb
//! channels, and the bias channel of §2 (`limbs::bias`) that every machine position carries.
//! After the bias-channel RMSNorm (`limbs::norm_weights`) the limbs come back as the integers
//! they are and the bias as exactly 1, whatever else the stream holds below 2^16.
//!
//! **The head.** Token `v`'s unembedding row reads only those three channels:
//! `logit_v = 2l·x_lo + 2h·x_hi + (C − l² − h²)·1`, which is
//! `C + x_lo² + x_hi² − (x_lo − l)² − (x_hi − h)²`. For the limbs the stream holds, it peaks at
//! `v` and every other VAL token is at least exactly 1 below. Every product and partial sum is an
//! integer below 2^21, so f32 computes it exactly in any order. `C = 2^20` lifts every winning
//! logit far above the text tokens'. Their rows have no weight on machine channels, and the
//! norm scales the text channels of a machine position by about 2^−29.
//!
//! **Why two limbs.** One 16-bit channel would need `2v·x − v²`, which reaches 2^32. f32 then
//! rounds neighbouring logits together, and the argmax is wrong for most values (a test shows it).

use super::limbs::{bias, norm_weights, rms_norm};

use alloc::vec;
use alloc::vec::Vec;

/// VAL tokens: one per 16-bit value.
pub const VALUES: usize = 1 << 16;
/// The lift of every VAL logit over the text tokens'.
pub const LIFT: f32 = (1 << 20) as f32;

/// The limb channels a VAL token writes and the head reads, besides the bias channel (channel
/// 0, as in `limbs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValChannels {
    pub lo: usize,
    pub hi: usize,
}

/// The bias channel of the §2 norm.
pub const BIAS: usize = 0;

fn limbs_of(v: u16) -> (f32, f32) {
    (f32::from(v as u8), f32::from((v >> 8) as u8))
}

/// VAL token `v`'s embedding row on a `d`-channel stream (sparse: channel, value).
pub fn embedding(ch: ValChannels, d: usize, v: u16) -> [(usize, f32); 3] {
    let (l, h) = limbs_of(v);
    [(BIAS, bias(d)), (ch.lo, l), (ch.hi, h)]
}

/// VAL token `v`'s unembedding row (sparse).
pub fn head_row(ch: ValChannels, v: u16) -> [(usize, f32); 3] {
    let (l, h) = limbs_of(v);
    [(ch.lo, 2.0 * l), (ch.hi, 2.0 * h), (BIAS, LIFT - l * l - h * h)]
}

/// Every VAL token's logit for the normalised stream `n`, each row's three products summed in
/// the order `order` gives (a permutation of 0..3).
pub fn logits(ch: ValChannels, n: &[f32], order: [usize; 3]) -> Vec<f32> {
    (0..VALUES)
        .map(|v| {
            let row = head_row(ch, v as u16);
            order.iter().fold(0.0f32, |s, &k| s + row[k].1 * n[row[k].0])
        })
        .collect()
}

/// The final norm's weights: those of §2 on the machine's channels (the bias and `machine`),
/// and the text model's own, `text`, on every other channel.
pub fn final_weights(d: usize, text: &[f32], machine: &[usize]) -> Vec<f32> {
    let of_machine = norm_weights(d);
    let mut w = text.to_vec();
    w[BIAS] = of_machine[BIAS];
    for &c in machine {
        w[c] = of_machine[c];
    }
    w
}

/// The final RMSNorm of a position, its sum of squares in the order `order`.
pub fn final_norm(x: &[f32], w: &[f32], order: &[usize]) -> Vec<f32> {
    rms_norm(x, w, 1e-6, order)
}

/// The index of the largest logit (the first, on ties).
pub fn argmax(l: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in l.iter().enumerate() {
        if v > l[best] {
            best = i;
        }
    }
    best
}

/// A stream of `d` channels holding VAL token `v`'s embedding and `other` values elsewhere
/// (other machine state, below 2^16), as the final norm sees it.
pub fn stream(ch: ValChannels, d: usize, v: u16, other: &[(usize, f32)]) -> Vec<f32> {
    let mut x = vec![0.0f32; d];
    for &(c, value) in other {
        x[c] = value;
    }
    for (c, value) in embedding(ch, d, v) {
        x[c] = value;
    }
    x
}

#[cfg(test)]
mod tests;
