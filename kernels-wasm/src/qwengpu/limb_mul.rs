//! The second machine's multiplication on 8-bit limbs (issue #22; the units and the norm's
//! exactness are in `limbs`): the low word in seven pre-norm SwiGLU layers, the unsigned high
//! word in ten, the signed one in twelve.
//! 1. the limb products `p_ij = a_i · b_j` (for the low word only the ten with `i + j ≤ 3`):
//!    `silu(a_i + 256) · b_j − 256 · b_j`, at most 65,025, which keeps them below the 2^16 the
//!    norm allows;
//! 2. each product's high byte `hi = ⌊p / 256⌋ = Σ_m [p ≥ 256m]` (254 steps). This is where the
//!    step unit's range is tight: its pre-activation `257(p − 256m) + 129` is at most 16,777,089
//!    in magnitude, under 2^24, so it is still an exact integer in f32;
//! 3. the low bytes `p − 256·hi`;
//! 4. … the columns `d_k = Σ_{i+j=k} lo_ij + Σ_{i+j=k−1} hi_ij` plus the carry from below (at
//!    most 4·255 + 3·254 + 6 = 1,788), one layer per limb: `d_k` into its result limb (if the
//!    word being computed holds it) and `q_k = Σ_{m=1…7} [d_k ≥ 256m]` into a carry channel
//!    that the next column adds; the next layer takes `256 q_k` back out of the limb.
//!
//! The signed high word is the unsigned one less `[a < 0]·b` and `[b < 0]·a` (mod 2^32): the
//! signs and the gated words come beside the products, their sum beside the columns, and one
//! subtraction (two layers) after them.
//!
//! **A second range limit.** A unit's contribution `w · h` is summed with the others into its
//! output channel, so it must stay below 2^24 too: a step's `h` grows as `257 |s − T|`, so a
//! step far from its threshold may only have small output weights (here 1), and the ×256 of a
//! carry goes through a pass unit, whose `h` is about 256.

use super::limbs::{Layer, Unit, LIMB, LIMBS};
use alloc::vec;
use alloc::vec::Vec;

/// Where a multiplication reads and writes: limbs `a`, `b`, `r`, and scratch channels
/// ([`scratch_len`] of them).
#[derive(Debug, Clone, Copy)]
pub struct MulChannels {
    pub a: usize,
    pub b: usize,
    pub r: usize,
    pub scratch: usize,
}

/// Which word of the product, as the ISA names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    /// The low word (`mul.lo`), seven layers.
    Low,
    /// The high word of the unsigned product (`mul.hi.u32`), ten layers.
    HighUnsigned,
    /// The high word of the signed product (`mul.hi.s32`), twelve layers.
    HighSigned,
}

/// The limb products `(i, j)` that reach the word: `i + j ≤ 3` for the low word, all 16 else.
fn pairs(which: Product) -> Vec<(usize, usize)> {
    let all = (0..LIMBS).flat_map(|i| (0..LIMBS).map(move |j| (i, j)));
    all.filter(|&(i, j)| which != Product::Low || i + j < LIMBS).collect()
}

/// Scratch channels a product needs: products, high and low bytes, carries (and, signed, the
/// signs, the two correction words, their sum, the unsigned high word and two adders' scratch).
pub fn scratch_len(which: Product) -> usize {
    let n = pairs(which).len();
    match which {
        Product::Low => 3 * n + 3,
        Product::HighUnsigned => 3 * n + 6,
        Product::HighSigned => 3 * n + 6 + 2 + 4 * LIMBS + 4 * LIMBS,
    }
}

/// The layers computing the `which` word of `a · b`.
pub fn mul(ch: MulChannels, which: Product) -> Vec<Layer> {
    if which == Product::HighSigned {
        return mulhi_signed(ch);
    }
    let pairs = pairs(which);
    let n = pairs.len();
    let (p, hi, lo) = (|k: usize| ch.scratch + k, |k: usize| ch.scratch + n + k, |k: usize| ch.scratch + 2 * n + k);
    let carry = |k: usize| ch.scratch + 3 * n + k - 1; // q_k, k = 1 …
    let limb = LIMB as f32;
    let (last, first_out) = if which == Product::Low { (LIMBS - 1, 0) } else { (2 * LIMBS - 1, LIMBS) };
    let mut layers: Vec<Layer> = (0..3 + last).map(|_| Layer::default()).collect();
    if which == Product::Low {
        layers.push(Layer::default()); // the last limb's carry comes out a layer later
    }

    for (k, &(i, j)) in pairs.iter().enumerate() {
        // silu(a_i + 256) is a_i + 256 exactly (the gate is at least 256), times b_j from `up`.
        layers[0].units.push(Unit {
            gate: vec![(ch.a + i, 1.0), (0, 256.0)],
            up: vec![(ch.b + j, 1.0)],
            down: vec![(p(k), 1.0)],
        });
        layers[0].pass(&[(ch.b + j, 1.0)], &[(p(k), -limb)]);
        for m in 1..LIMB - 1 {
            layers[1].step(&[(p(k), 1.0)], (m * LIMB) as f32, &[(hi(k), 1.0)]);
        }
        layers[2].pass(&[(p(k), 1.0), (hi(k), -limb)], &[(lo(k), 1.0)]);
    }

    // Column k: the low bytes of its products, the high parts of column k − 1's, and the carry
    // q_{k−1} from below.
    let column = |k: usize| -> Vec<(usize, f32)> {
        let mut terms: Vec<(usize, f32)> = Vec::new();
        for (x, &(i, j)) in pairs.iter().enumerate() {
            if i + j == k {
                terms.push((lo(x), 1.0));
            }
            if i + j + 1 == k {
                terms.push((hi(x), 1.0));
            }
        }
        if k >= 2 {
            terms.push((carry(k - 1), 1.0));
        }
        terms
    };
    let out = |k: usize| (k >= first_out && k < first_out + LIMBS).then(|| ch.r + k - first_out);
    if let Some(r) = out(0) {
        layers[3].pass(&column(0), &[(r, 1.0)]);
    }
    for k in 1..=last {
        let d = column(k);
        if let Some(r) = out(k) {
            layers[2 + k].pass(&d, &[(r, 1.0)]);
        }
        // The top limb of the 64-bit product never carries; the low word's top limb does, and
        // its carry is taken out and goes no further.
        if k < 2 * LIMBS - 1 {
            for m in 1..=7 {
                layers[2 + k].step(&d, (m * LIMB) as f32, &[(carry(k), 1.0)]);
            }
            // The step units' outputs reach 257·1,787: times 256 they would pass 2^24, so the
            // carry is taken out of its limb a layer later, from the carry channel.
            if let Some(r) = out(k) {
                layers[3 + k].pass(&[(carry(k), 1.0)], &[(r, -limb)]);
            }
        }
    }
    layers
}

/// `mul.hi.s32`: the unsigned high word less `[a < 0]·b` and `[b < 0]·a` (mod 2^32), because a
/// negative word is its unsigned value less 2^32. The signs and the gated words come in the
/// first two layers, their sum in the next two (all beside the unsigned product), and one
/// subtraction after it.
fn mulhi_signed(ch: MulChannels) -> Vec<Layer> {
    use super::limbs::{adder, AdderChannels};
    let base = ch.scratch + scratch_len(Product::HighUnsigned);
    let (sa, sb) = (base, base + 1);
    let (t1, t2, t, u) = (base + 2, base + 2 + LIMBS, base + 2 + 2 * LIMBS, base + 2 + 3 * LIMBS);
    let (scratch1, scratch2) = (base + 2 + 4 * LIMBS, base + 2 + 6 * LIMBS);
    let mut layers = mul(MulChannels { r: u, ..ch }, Product::HighUnsigned);
    layers[0].step(&[(ch.a + LIMBS - 1, 1.0)], 128.0, &[(sa, 1.0)]);
    layers[0].step(&[(ch.b + LIMBS - 1, 1.0)], 128.0, &[(sb, 1.0)]);
    // sign ? word : 0, as select's gated unit.
    layers[1].gated(sa, &[(ch.b, 1.0)], t1);
    layers[1].gated(sb, &[(ch.a, 1.0)], t2);
    let sum = adder(AdderChannels { a: t1, b: t2, r: t, scratch: scratch1 }, false);
    for (layer, extra) in layers[2..4].iter_mut().zip(sum) {
        layer.units.extend(extra.units);
    }
    layers.extend(adder(AdderChannels { a: u, b: t, r: ch.r, scratch: scratch2 }, true));
    layers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::isa::Alu;
    use crate::qwengpu::limbs::{run_on, word};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Runs `which` of `a · b` on a 256-channel stream.
    fn run(layers: &[Layer], ch: MulChannels, a: u32, b: u32) -> Option<u32> {
        let x = run_on(layers, 256, (ch.a, a), (ch.b, b));
        word(&x[ch.r..ch.r + LIMBS])
    }

    const CH: MulChannels = MulChannels { a: 1, b: 5, r: 9, scratch: 13 };

    #[test]
    fn mul_matches_the_isa_on_every_limb_pair_and_at_random() {
        let layers = mul(CH, Product::Low);
        assert_eq!(layers.len(), 7);
        // Every limb pair in every limb (the largest columns and carries: 0xff everywhere).
        for x in 0..256u32 {
            for y in 0..256u32 {
                let (a, b) = (x * 0x0101_0101, y * 0x0101_0101);
                assert_eq!(run(&layers, CH, a, b), Some(Alu::Mul.eval(a, b)), "{a:#x} * {b:#x}");
            }
        }
        let mut rng = Rng::new(5);
        for _ in 0..20_000 {
            let (a, b) = (rng.next_u64() as u32, (rng.next_u64() >> 32) as u32);
            assert_eq!(run(&layers, CH, a, b), Some(a.wrapping_mul(b)), "{a:#x} * {b:#x}");
        }
    }

    #[test]
    fn mulhi_matches_the_isa_signed_and_unsigned() {
        assert!(CH.scratch + scratch_len(Product::HighSigned) <= 256);
        for (which, alu, depth) in [(Product::HighUnsigned, Alu::MulHiU, 10), (Product::HighSigned, Alu::MulHiS, 12)] {
            let layers = mul(CH, which);
            assert_eq!(layers.len(), depth);
            // Limb pairs (every x, every third y and 255) in every limb, with the sign bit
            // flipped on one side, and random pairs.
            let ys = (0..256u32).step_by(3).chain([255]);
            let limb_pairs: Vec<(u32, u32)> = (0..256u32)
                .flat_map(|x| {
                    ys.clone().flat_map(move |y| {
                        [(x * 0x0101_0101, y * 0x0101_0101), (x * 0x0101_0101, (y * 0x0101_0101) ^ 0x8000_0000)]
                    })
                })
                .collect();
            let mut rng = Rng::new(11);
            let random: Vec<(u32, u32)> =
                (0..5_000).map(|_| (rng.next_u64() as u32, (rng.next_u64() >> 32) as u32)).collect();
            let edges = [0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff];
            let edge_pairs = edges.iter().flat_map(|&a| edges.iter().map(move |&b| (a, b)));
            for (a, b) in edge_pairs.chain(limb_pairs).chain(random) {
                assert_eq!(run(&layers, CH, a, b), Some(alu.eval(a, b)), "{alu:?} {a:#x} {b:#x}");
            }
        }
    }
}
