//! The second machine's bitwise operations and shifts on 8-bit limbs (issue #22; the units and
//! their exactness argument are in `limbs`). Both take a word's 32 bits first ([`to_bits`]), in
//! one layer, then combine them in a second.

use super::limbs::{Layer, LIMB, LIMBS};
use alloc::vec::Vec;

/// The layer writing the 32 bits of the word in limbs `from..from + LIMBS` to channels
/// `to..to + 32` (bit `8i + k` is bit `k` of limb `i`). A limb `v` goes through its thermometer
/// code, the 255 steps `[v ≥ j]`: bit `k` of `v` is `Σ_j (bit_k(j) − bit_k(j − 1)) · [v ≥ j]`,
/// a sum of terms in {−1, 0, 1} that telescopes to `bit_k(v)`. 510 units per limb.
pub fn to_bits(from: usize, to: usize) -> Layer {
    let mut layer = Layer::default();
    for i in 0..LIMBS {
        for j in 1..LIMB {
            let down: Vec<(usize, f32)> = (0..8)
                .filter_map(|k| {
                    let delta = ((j >> k) & 1) as f32 - (((j - 1) >> k) & 1) as f32;
                    (delta != 0.0).then_some((to + 8 * i + k, delta))
                })
                .collect();
            layer.step(&[(from + i, 1.0)], j as f32, &down);
        }
    }
    layer
}

/// A bitwise operation of two words held as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logic {
    And,
    Or,
    Xor,
}

/// The layer writing `a op b` into limbs `r..r + LIMBS`, from the bits of `a` and `b`
/// ([`to_bits`]): per bit `[a + b ≥ 2]` (and), `[a + b ≥ 1]` (or) or their difference (xor),
/// sent to its limb with weight `2^k`.
pub fn logic(op: Logic, a_bits: usize, b_bits: usize, r: usize) -> Layer {
    let mut layer = Layer::default();
    for bit in 0..32 {
        let terms = [(a_bits + bit, 1.0), (b_bits + bit, 1.0)];
        let (limb, weight) = (r + bit / 8, (1u32 << (bit % 8)) as f32);
        match op {
            Logic::And => layer.step(&terms, 2.0, &[(limb, weight)]),
            Logic::Or => layer.step(&terms, 1.0, &[(limb, weight)]),
            Logic::Xor => {
                layer.step(&terms, 1.0, &[(limb, weight)]);
                layer.step(&terms, 2.0, &[(limb, -weight)]);
            }
        }
    }
    layer
}

/// A shift of a word by another word's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shift {
    Shl,
    Shr,
    Sra,
}

/// Where a shift reads and writes: the shifted word's limbs `a`, the amount's limbs `b`, the
/// result's limbs `r`, and 65 scratch channels (the 32 bits of `a`, the thermometer `[b₀ ≥ m]`
/// for `m = 1 … 32`, and `hi`).
#[derive(Debug, Clone, Copy)]
pub struct ShiftChannels {
    pub a: usize,
    pub b: usize,
    pub r: usize,
    pub scratch: usize,
}

/// The two layers computing `r = a op b`, shifts by 32 or more giving 0 (`Sra`: the sign):
/// 1. the bits of `a`; the amount's low limb as the thermometer `T_m = [b₀ ≥ m]` (`T₀` is the
///    constant channel); `hi = [b₁ + b₂ + b₃ ≥ 1]`;
/// 2. result bit `k` is source bit `s` when the amount is `m` (`k = s + m` for `shl`,
///    `s = k + m` otherwise): the step `[bit_s + T_m − T_{m+1} − hi ≥ 2]`, which needs the bit,
///    the one-hot amount `T_m − T_{m+1}` and a small amount all at 1. Past bit 31, `sra` takes
///    the sign, and for amounts of 32 or more the sign fills every bit (`T₃₂` or `hi`, as two
///    exclusive terms).
pub fn shift(op: Shift, ch: ShiftChannels) -> [Layer; 2] {
    let bits = ch.scratch;
    let t = |m: usize| if m == 0 { 0 } else { ch.scratch + 31 + m };
    let hi = ch.scratch + 64;
    let mut first = to_bits(ch.a, bits);
    for m in 1..=32 {
        first.step(&[(ch.b, 1.0)], m as f32, &[(t(m), 1.0)]);
    }
    first.step(&[(ch.b + 1, 1.0), (ch.b + 2, 1.0), (ch.b + 3, 1.0)], 1.0, &[(hi, 1.0)]);
    let mut second = Layer::default();
    let out = |k: usize| [(ch.r + k / 8, (1u32 << (k % 8)) as f32)];
    for k in 0..32usize {
        for m in 0..32usize {
            let source = match op {
                Shift::Shl => k.checked_sub(m),
                Shift::Shr => (k + m < 32).then_some(k + m),
                Shift::Sra => Some((k + m).min(31)),
            };
            if let Some(s) = source {
                second.step(&[(bits + s, 1.0), (t(m), 1.0), (t(m + 1), -1.0), (hi, -1.0)], 2.0, &out(k));
            }
        }
        if op == Shift::Sra {
            second.step(&[(bits + 31, 1.0), (t(32), 1.0)], 2.0, &out(k));
            second.step(&[(bits + 31, 1.0), (hi, 1.0), (t(32), -1.0)], 2.0, &out(k));
        }
    }
    [first, second]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwengpu::isa::Alu;
    use crate::qwengpu::limbs::{bias, limbs, run_on, word};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn bitwise_operations_match_the_isa_on_every_limb_pair() {
        // Stream: bias, a (4), b (4), r (4), then the bits of a (32) and of b (32): 77 channels in
        // a 256-channel stream (a power of four).
        let d = 256;
        let (a_at, b_at, r_at, a_bits, b_bits) = (1, 5, 9, 13, 45);
        let order: Vec<usize> = (0..d).collect();
        let bits = [to_bits(a_at, a_bits), to_bits(b_at, b_bits)];
        let ops = [(Logic::And, Alu::And), (Logic::Or, Alu::Or), (Logic::Xor, Alu::Xor)];
        let layers: Vec<(Layer, Alu)> = ops.iter().map(|&(op, alu)| (logic(op, a_bits, b_bits, r_at), alu)).collect();
        for x in 0..256u32 {
            for y in 0..256u32 {
                let (a, b) = (x * 0x0101_0101, (y * 0x0101_0101) ^ 0x5a00_ff00);
                let mut s = vec![0.0f32; d];
                s[0] = bias(d);
                s[a_at..a_at + LIMBS].copy_from_slice(&limbs(a));
                s[b_at..b_at + LIMBS].copy_from_slice(&limbs(b));
                for layer in &bits {
                    layer.forward(&mut s, 1e-6, &order);
                }
                for k in 0..32 {
                    assert_eq!((s[a_bits + k], s[b_bits + k]), (((a >> k) & 1) as f32, ((b >> k) & 1) as f32));
                }
                for (layer, alu) in &layers {
                    let mut t = s.clone();
                    layer.forward(&mut t, 1e-6, &order);
                    assert_eq!(word(&t[r_at..r_at + LIMBS]), Some(alu.eval(a, b)), "{alu:?} {a:#x} {b:#x}");
                }
            }
        }
    }

    #[test]
    fn shifts_match_the_isa_for_every_amount_and_limb_value() {
        let d = 256;
        let ch = ShiftChannels { a: 1, b: 5, r: 9, scratch: 13 };
        let ops = [(Shift::Shl, Alu::Shl), (Shift::Shr, Alu::Shr), (Shift::Sra, Alu::Sra)];
        let layers: Vec<([Layer; 2], Alu)> = ops.iter().map(|&(op, alu)| (shift(op, ch), alu)).collect();
        let amounts = (0..=40u32).chain([63, 64, 255, 256, 257, 0x1_0000, 0x100_0000, 0x8000_0000, u32::MAX]);
        let amounts: Vec<u32> = amounts.collect();
        let words = (0..256u32).flat_map(|x| [x * 0x0101_0101, (x * 0x0101_0101) ^ 0x8421_1248]);
        for a in words {
            for &b in &amounts {
                for (layers, alu) in &layers {
                    let x = run_on(layers, d, (ch.a, a), (ch.b, b));
                    assert_eq!(word(&x[ch.r..ch.r + LIMBS]), Some(alu.eval(a, b)), "{alu:?} {a:#x} by {b}");
                }
            }
        }
    }
}
