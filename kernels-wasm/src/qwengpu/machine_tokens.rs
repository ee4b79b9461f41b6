//! The second machine's tokens (issue #22; `docs/qwengpu-second-machine.md` §1), both ends of a
//! hop between positions in the text model's own arithmetic: an embedding row per token, and
//! the unembedding rows whose argmax gives the token back.
//!
//! - **VAL tokens**, 65,536: a 16-bit value that one machine step writes and a later step reads,
//!   as its two 8-bit limbs.
//! - **Record tokens**, 32,768: "warp `w` ran block `b` with lanes `m`" (32 warps, 64 ROM blocks,
//!   4 lane bits), the control decision of a step.
//!
//! **Fields.** A token is a tuple of small integers, each in a channel of its own: a kind (0 for
//! VAL, 1 for a record) and its kind's fields. Its embedding row writes those integers, with the
//! bias channel of §2 (`limbs::bias`) that every machine position carries. After the
//! bias-channel RMSNorm (`limbs::norm_weights`) they come back exactly, and the bias comes back
//! as exactly 1.
//!
//! **The head.** A token's unembedding row reads its kind's channels:
//! `LIFT + Σ_fields w·(2v·x − v²)`, where `v` is the token's value of the field, `x` the
//! channel's value and `w` the field's weight. Each term is `w·(x² − (x − v)²)`, so for the
//! integers in the stream the logit peaks at the token whose every field equals its channel.
//! A token that differs in a field loses at least that field's weight.
//! - Data fields weigh 1. The kind weighs [`KIND`], more than all of a kind's data fields can
//!   gain (each at most 255² over the field's range). So a position whose kind channel says VAL
//!   samples a VAL token whatever its record channels hold, and the reverse.
//! - Every product and partial sum is an integer below 2^21, so f32 computes each logit exactly in
//!   any order.
//! - `LIFT = 2^20` puts every winner far above the text tokens. Their rows have no weight on
//!   machine channels, and the bias scales a machine position's text channels by about 2^−29.
//!
//! The machine must keep every field channel within its field's range at machine positions
//! (the head's argument needs `x ≤ 255`).
//!
//! **Why limbs.** One 16-bit channel would need `2v·x − v²`, which reaches 2^32. f32 then rounds
//! neighbouring logits together, and the argmax is wrong for most values (a test shows it).

use super::isa::SECOND_ROM_BLOCKS;
use super::limbs::{bias, norm_weights, rms_norm};
use alloc::vec;
use alloc::vec::Vec;

/// The lift of every machine logit over the text tokens'.
pub const LIFT: f32 = (1 << 20) as f32;
/// The kind field's weight: above what three data fields of 256 values can gain (3 · 255²).
pub const KIND: f32 = (1 << 18) as f32;
/// The bias channel of the §2 norm (channel 0, as in `limbs`).
pub const BIAS: usize = 0;

/// One field of a token: its channel and how many values it takes (at most 256).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub channel: usize,
    pub size: u32,
}

/// The machine's vocabulary: the kind channel, then the VAL tokens' fields and the records'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    /// The §2 bias channel ([`BIAS`] on the machine's own stream; after the text's channels in a
    /// spliced model).
    pub bias: usize,
    pub kind: usize,
    pub val: [Field; 2],
    pub record: [Field; 3],
}

/// A machine token, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    Val(u16),
    /// Warp, ROM block, lane mask.
    Record {
        warp: u32,
        block: u32,
        mask: u32,
    },
}

impl Vocab {
    /// The channels from `first` on: kind, VAL low and high limbs, warp, block, mask.
    pub fn at(first: usize) -> Vocab {
        let f = |i: usize, size: u32| Field { channel: first + i, size };
        Vocab {
            bias: BIAS,
            kind: first,
            val: [f(1, 256), f(2, 256)],
            record: [f(3, 32), f(4, SECOND_ROM_BLOCKS as u32), f(5, 16)],
        }
    }

    /// [`Self::at`] with the bias in channel `bias`.
    pub fn on(first: usize, bias: usize) -> Vocab {
        Vocab { bias, ..Vocab::at(first) }
    }

    /// The channels the fields take (the kind's first).
    pub fn channels(&self) -> Vec<usize> {
        let mut c = vec![self.kind];
        c.extend(self.val.iter().chain(&self.record).map(|f| f.channel));
        c
    }

    pub fn vals(&self) -> usize {
        self.val.iter().map(|f| f.size as usize).product()
    }

    pub fn len(&self) -> usize {
        self.vals() + self.record.iter().map(|f| f.size as usize).product::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Token `id`: VAL tokens first, then records (mixed radix, the first field fastest).
    pub fn token(&self, id: usize) -> Option<Token> {
        if id < self.vals() {
            return Some(Token::Val(id as u16));
        }
        let mut rest = id - self.vals();
        let mut v = [0u32; 3];
        for (v, f) in v.iter_mut().zip(&self.record) {
            *v = (rest % f.size as usize) as u32;
            rest /= f.size as usize;
        }
        (rest == 0).then_some(Token::Record { warp: v[0], block: v[1], mask: v[2] })
    }

    pub fn id(&self, t: Token) -> usize {
        match t {
            Token::Val(v) => v as usize,
            Token::Record { warp, block, mask } => {
                let [w, b, _] = self.record;
                self.vals() + (warp + w.size * (block + b.size * mask)) as usize
            }
        }
    }

    /// A token's field values: `(channel, value, weight)`, the kind first.
    fn fields(&self, t: Token) -> Vec<(usize, f32, f32)> {
        match t {
            Token::Val(v) => vec![
                (self.kind, 0.0, KIND),
                (self.val[0].channel, f32::from(v as u8), 1.0),
                (self.val[1].channel, f32::from((v >> 8) as u8), 1.0),
            ],
            Token::Record { warp, block, mask } => vec![
                (self.kind, 1.0, KIND),
                (self.record[0].channel, warp as f32, 1.0),
                (self.record[1].channel, block as f32, 1.0),
                (self.record[2].channel, mask as f32, 1.0),
            ],
        }
    }

    /// Token `t`'s embedding row on a `d`-channel stream (sparse: channel, value).
    pub fn embedding(&self, d: usize, t: Token) -> Vec<(usize, f32)> {
        let mut row = vec![(self.bias, bias(d))];
        row.extend(self.fields(t).into_iter().map(|(c, v, _)| (c, v)));
        row
    }

    /// Token `t`'s unembedding row (sparse), the bias channel's weight last.
    pub fn head_row(&self, t: Token) -> Vec<(usize, f32)> {
        let fields = self.fields(t);
        let mut row: Vec<(usize, f32)> = fields.iter().map(|&(c, v, w)| (c, 2.0 * w * v)).collect();
        row.push((self.bias, fields.iter().fold(LIFT, |s, &(_, v, w)| s - w * v * v)));
        row
    }

    /// Every machine token's logit for the normalised stream `n`, each row summed forwards or
    /// backwards.
    pub fn logits(&self, n: &[f32], backwards: bool) -> Vec<f32> {
        (0..self.len())
            .filter_map(|id| self.token(id))
            .map(|t| {
                let row = self.head_row(t);
                let term = |&(c, w): &(usize, f32)| w * n[c];
                if backwards {
                    row.iter().rev().fold(0.0f32, |s, p| s + term(p))
                } else {
                    row.iter().fold(0.0f32, |s, p| s + term(p))
                }
            })
            .collect()
    }

    /// A stream of `d` channels holding token `t`'s embedding over `other` values (other machine
    /// state), as the final norm sees it.
    pub fn stream(&self, d: usize, t: Token, other: &[(usize, f32)]) -> Vec<f32> {
        let mut x = vec![0.0f32; d];
        for &(c, value) in other.iter().chain(&self.embedding(d, t)) {
            x[c] = value;
        }
        x
    }
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

#[cfg(test)]
mod tests;
