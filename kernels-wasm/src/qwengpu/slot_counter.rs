//! Which value of its step a VAL token is (issue #22, `docs/qwengpu-second-machine.md` §6): the
//! slot `j` of a VAL token is how many VAL tokens have come since the step's record token (the
//! compiler fixes the order of a block's live-out words, so `j` names the register and lane the
//! token's value goes to). A token's embedding cannot know `j`; one Gated DeltaNet head counts it
//! in Qwen3.5's own arithmetic, and one SwiGLU layer turns the count into a one-hot slot.
//!
//! **The count.** The delta rule only moves a state entry towards the value written,
//! `c ← c + β(v − c)`, so a head cannot add 1, but it can halve: with the key always the same row,
//! - a record token writes `v = 32` with `β = 1` (`sigmoid(32)` is exactly 1): `c = 32`;
//! - a VAL token writes `v = 0` with `β = 1/2` (`sigmoid(0)` is exactly 0.5): `c ← c/2`.
//!
//! So `c = 32 · 2^−j`, a power of two, exact for any `j` f32 can hold. The row's other entry is a
//! constant `B = 2^24` (written with it, kept by `B + β(B − B)`), so RMSNormGated's root is
//! exactly `B/4` whatever `c` is, and the head puts exactly `2^−j` in the stream. At a text
//! position the key is 0 (its pre-activation comes from the bias channel), so nothing changes.
//!
//! **The step's record.** A second head of the same layer holds the last record token's fields
//! (warp, block, lane mask) for the step's VAL tokens: a record writes `[B, 32 + w, 32 + b,
//! 32 + m]` with `β = 1`, a VAL token writes nothing (`β = sigmoid(−128)`, exactly 0), and the
//! output takes the offset of 32 (there for SiLU to be the identity) back off. So every position
//! of a step knows the step's block, which with its slot names the register it carries.
//!
//! **The one-hot.** `[j > s] = [1 − 2^(s+1) · 2^−j ≥ 0]`: the step unit of `limbs` on that
//! pre-activation. The side that can be huge (`j ≤ s`) is the negative one, where SiLU is −0 for
//! any magnitude; on the other side the pre-activation is in `[0, 1)`, and the unit's two
//! arguments, `257u + 129` and `257u + 128`, lie in the same binade above 128, so they round alike
//! and differ by exactly 1. Slot `s` is `[j > s − 1] − [j > s]`, with `[j > −1]` the constant 1.

use super::deltanet::{DeltaNet, DeltaNetWeights, Matrix};
use super::limbs::Layer;
use super::memory::exact_weights_sized;
use alloc::vec;

/// The constant entry of the counter's row.
const B: f32 = 16_777_216.0;
/// The key and query pre-activation (SiLU is the identity there, and L2 makes it exactly 1).
const KEY: f32 = 1024.0;

/// Where the counter reads and writes (channel 0 of the normed stream is the bias, 1 there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub d_model: usize,
    pub one: usize,
    /// 0 at a VAL token, 1 at a record token.
    pub kind: usize,
    /// Where the head writes `2^−j`.
    pub count: usize,
    /// The first of `slots` one-hot channels.
    pub slot: usize,
    pub slots: usize,
    /// A record token's warp, block and mask channels, and where the step's copies go.
    pub record_in: [usize; 3],
    pub record: usize,
}

impl Counter {
    /// The layer: head 0 counts, head 1 holds the record; `d_k = d_v = 4` (powers of four, so
    /// the scales are exact), both keyed on row 0.
    pub fn weights(&self) -> DeltaNetWeights {
        let (d, heads, dk, dv) = (self.d_model, 2, 4, 4);
        let mut w_qkv = Matrix::zeros(heads * (2 * dk + dv), d);
        let value = |h: usize, j: usize| 2 * heads * dk + h * dv + j;
        for h in 0..heads {
            // Query and key row 0, and the value's constant entry 0.
            w_qkv.set(h * dk, self.one, KEY);
            w_qkv.set((heads + h) * dk, self.one, KEY);
            w_qkv.set(value(h, 0), self.one, B);
        }
        // The count: 32 at a record, 0 at a VAL token.
        w_qkv.set(value(0, 1), self.kind, 32.0);
        for (j, &field) in self.record_in.iter().enumerate() {
            w_qkv.set(value(1, 1 + j), self.one, 32.0);
            w_qkv.set(value(1, 1 + j), field, 1.0);
        }
        // An output entry is the row's entry over 2 (the query is 1/2 after its 1/√d_k), over
        // the root B/4, times the norm weight 2^13 and silu(z) = 32: 16 · 2^−j becomes 2^−j, and
        // 32 + f becomes (32 + f)/32, whose offset the constant entry (2^19 out) takes off.
        let cols = heads * dv;
        let mut w_out = Matrix::zeros(d, cols);
        w_out.set(self.count, 1, 1.0);
        for j in 0..3 {
            w_out.set(self.record + j, dv + 1 + j, 32.0);
            w_out.set(self.record + j, dv, -32.0 / 524_288.0);
        }
        let mut w = exact_weights_sized(d, self.one, (heads, dk, dv), 8192.0, w_qkv, w_out);
        // β: head 0 sigmoid(32 · kind), 1 at a record and exactly 1/2 at a VAL token; head 1
        // sigmoid(160 · kind − 128), 1 at a record and exactly 0 at a VAL token.
        w.w_b = Matrix::zeros(heads, d);
        w.w_b.set(0, self.kind, 32.0);
        w.w_b.set(1, self.kind, 160.0);
        w.w_b.set(1, self.one, -128.0);
        w
    }

    pub fn layer(&self) -> DeltaNet {
        DeltaNet::new(self.weights())
    }

    /// The SwiGLU layer that turns `2^−j` into the one-hot slot `j` (all zero past the last slot,
    /// and before any record token).
    pub fn decode(&self) -> Layer {
        let mut l = Layer::default();
        l.pass(&[(self.one, 1.0)], &[(self.slot, 1.0)]);
        for s in 0..self.slots {
            let mut down = vec![(self.slot + s, -1.0)];
            if s + 1 < self.slots {
                down.push((self.slot + s + 1, 1.0));
            }
            l.step(&[(self.one, 1.0), (self.count, -(2f32.powi(s as i32 + 1)))], 0.0, &down);
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::limbs::{bias, norm_weights, rms_norm};
    use alloc::vec::Vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    const D: usize = 64;

    fn counter() -> Counter {
        Counter { d_model: D, one: 0, kind: 1, count: 2, slot: 3, slots: 40, record_in: [43, 44, 45], record: 46 }
    }

    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Pos {
        Text,
        /// Warp, block, mask.
        Record([u8; 3]),
        Val,
    }

    /// The stream before its norm: a machine position's bias and kind; a text position's own
    /// channels (no bias, no machine channel).
    fn stream(c: &Counter, p: Pos, rng: &mut Rng) -> Vec<f32> {
        let mut x = vec![0.0; D];
        match p {
            Pos::Text => (50..D).for_each(|i| x[i] = (rng.next_u64() % 2001) as f32 / 100.0 - 10.0),
            Pos::Record(fields) => {
                x[c.one] = bias(D);
                x[c.kind] = 1.0;
                for (&ch, f) in c.record_in.iter().zip(fields) {
                    x[ch] = f32::from(f);
                }
            }
            Pos::Val => x[c.one] = bias(D),
        }
        x
    }

    /// Runs `positions` through the counting head and the decoder; at each machine position the
    /// slot channels are the one-hot of the VAL tokens since the last record (none before a
    /// record, or past the last slot); at text positions the head writes nothing and its state
    /// does not move.
    fn check(positions: &[Pos], rng: &mut Rng) {
        let c = counter();
        let (mut net, decode) = (c.layer(), c.decode());
        let order: Vec<usize> = (0..D).collect();
        let (mut since, mut record): (Option<usize>, [u8; 3]) = (None, [0; 3]);
        for (i, &p) in positions.iter().enumerate() {
            let mut x = stream(&c, p, rng);
            let before = net.state.clone();
            let y = net.step(&rms_norm(&x, &norm_weights(D), 1e-6, &order));
            for ch in [c.count, c.record, c.record + 1, c.record + 2] {
                x[ch] += y[ch];
            }
            decode.forward(&mut x, 1e-6, &order);
            since = match p {
                Pos::Text => since,
                Pos::Record(fields) => {
                    record = fields;
                    Some(0)
                }
                Pos::Val => since.map(|j| j + 1),
            };
            let slots = &x[c.slot..c.slot + c.slots];
            if p == Pos::Text {
                assert!(y.iter().all(|&v| v == 0.0) && net.state == before, "position {i}: text moved the counter");
                assert!(slots.iter().all(|&v| v == 0.0), "position {i}: a slot at a text position");
                continue;
            }
            let want: Vec<f32> = (0..c.slots).map(|s| f32::from(u8::from(since == Some(s)))).collect();
            assert_eq!(slots, &want[..], "position {i} ({p:?}), {since:?} VAL tokens since the record");
            if let Some(j) = since {
                assert_eq!(x[c.count], 2f32.powi(-(j as i32)), "position {i}");
            }
            let held = &x[c.record..c.record + 3];
            assert_eq!(held, &record.map(f32::from)[..], "position {i}: the step's record");
        }
    }

    /// Every count from 0 to 80 (past the 40 slots and past f32's 24 mantissa bits), with text
    /// positions interleaved, after VAL tokens that came before any record.
    #[test]
    fn the_head_counts_val_tokens_since_the_record_exactly() {
        let mut rng = Rng::new(3);
        let mut p = vec![Pos::Val, Pos::Val, Pos::Text, Pos::Record([31, 31, 15])];
        for j in 0..80 {
            p.push(if j % 7 == 3 { Pos::Text } else { Pos::Val });
        }
        p.extend([Pos::Record([0; 3]), Pos::Record([1, 2, 3]), Pos::Val, Pos::Text, Pos::Record([7, 0, 9]), Pos::Val]);
        check(&p, &mut rng);
    }

    /// Random machine steps (a record, then 0–33 VAL tokens) with text between them.
    #[test]
    fn random_steps_and_text() {
        let mut rng = Rng::new(8);
        let mut p = Vec::new();
        for _ in 0..60 {
            p.push(Pos::Record([0u8; 3].map(|_| (rng.next_u64() % 32) as u8)));
            for _ in 0..rng.next_u64() % 34 {
                p.push(if rng.next_u64().is_multiple_of(9) { Pos::Text } else { Pos::Val });
            }
        }
        check(&p, &mut rng);
    }

    /// The halving needs β exactly 1/2: with the VAL tokens' gate at 0.001 instead of 0, the
    /// counts come out wrong.
    #[test]
    fn an_inexact_half_breaks_the_count() {
        let c = counter();
        let mut w = c.weights();
        w.w_b.set(0, c.one, 0.001);
        let mut net = DeltaNet::new(w);
        let order: Vec<usize> = (0..D).collect();
        let mut rng = Rng::new(1);
        let mut wrong = 0;
        for (j, p) in [Pos::Record([1, 1, 1])].into_iter().chain([Pos::Val; 30]).enumerate() {
            let x = stream(&c, p, &mut rng);
            let y = net.step(&rms_norm(&x, &norm_weights(D), 1e-6, &order));
            wrong += usize::from(y[c.count] != 2f32.powi(-(j as i32)));
        }
        assert!(wrong > 20, "only {wrong} of 31 counts wrong");
    }
}
