//! The second machine's multiplication, the low 32 bits of `a · b` on 8-bit limbs (issue #22;
//! the units and the norm's exactness are in `limbs`), in seven pre-norm SwiGLU layers:
//! 1. the ten limb products `p_ij = a_i · b_j` with `i + j ≤ 3` (the others only reach the high
//!    word): `silu(a_i + 256) · b_j − 256 · b_j`, at most 65,025, which keeps them below the
//!    2^16 the norm allows;
//! 2. each product split into its low byte and `hi = ⌊p / 256⌋ = Σ_m [p ≥ 256m]` (254 steps).
//!    This is where the step unit's range is tight: its pre-activation `257(p − 256m) + 129` is at
//!    most 16,777,089 in magnitude, under 2^24, so it is still an exact integer in f32;
//! 3. the low bytes `p − 256·hi`;
//! 4. … 7. the columns `d_k = Σ_{i+j=k} lo_ij + Σ_{i+j=k−1} hi_ij` plus the carry from below
//!    (column 3 at most 4·255 + 3·254 + 4 = 1,786), one layer per limb: `d_k` into `r_k` and
//!    `q_k = Σ_{m=1…7} [d_k ≥ 256m]` into a carry channel that the next column adds, and the next
//!    layer takes `256 q_k` back out of `r_k`. `r₀ = lo₀₀` needs no carry; the carry out of
//!    limb 3 is taken out of `r₃` and goes no further.
//!
//! **A second range limit.** A unit's contribution `w · h` is summed with the others into its
//! output channel, so it must stay below 2^24 too: a step's `h` grows as `257 |s − T|`, so a
//! step far from its threshold may only have small output weights (here 1), and the ×256 of a
//! carry goes through a pass unit, whose `h` is about 256.

use super::limbs::{Layer, Unit, LIMB, LIMBS};
use alloc::vec;
use alloc::vec::Vec;

/// Where a multiplication reads and writes: limbs `a`, `b`, `r`, and 33 scratch channels (10
/// products, 10 high parts, 10 low bytes, 3 carries).
#[derive(Debug, Clone, Copy)]
pub struct MulChannels {
    pub a: usize,
    pub b: usize,
    pub r: usize,
    pub scratch: usize,
}

/// The products that reach the low word, `(i, j)` with `i + j ≤ 3`.
fn pairs() -> Vec<(usize, usize)> {
    (0..LIMBS).flat_map(|i| (0..LIMBS - i).map(move |j| (i, j))).collect()
}

/// The seven layers computing `r = a · b mod 2^32`.
pub fn mul(ch: MulChannels) -> [Layer; 7] {
    let pairs = pairs();
    let n = pairs.len();
    let (p, hi, lo) = (|k: usize| ch.scratch + k, |k: usize| ch.scratch + n + k, |k: usize| ch.scratch + 2 * n + k);
    let carry = |k: usize| ch.scratch + 3 * n + k - 1; // q_k, k = 1 … 3
    let limb = LIMB as f32;
    let mut layers: [Layer; 7] = Default::default();

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
    layers[3].pass(&column(0), &[(ch.r, 1.0)]);
    for k in 1..LIMBS {
        let (here, next) = (&mut layers[2 + k], k + 1);
        let d = column(k);
        here.pass(&d, &[(ch.r + k, 1.0)]);
        for m in 1..=7 {
            here.step(&d, (m * LIMB) as f32, &[(carry(k), 1.0)]);
        }
        // The step units' outputs reach 257·1,786: times 256 they would pass 2^24, so the
        // carry is taken out of its limb a layer later, from the carry channel.
        layers[2 + next].pass(&[(carry(k), 1.0)], &[(ch.r + k, -limb)]);
    }
    layers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::isa::Alu;
    use crate::qwengpu::limbs::{bias, limbs, word};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn mul_matches_the_isa_on_every_limb_pair_and_at_random() {
        let d = 64;
        let ch = MulChannels { a: 1, b: 5, r: 9, scratch: 13 };
        let order: Vec<usize> = (0..d).collect();
        let layers = mul(ch);
        let run = |a: u32, b: u32| {
            let mut x = vec![0.0f32; d];
            x[0] = bias(d);
            x[ch.a..ch.a + LIMBS].copy_from_slice(&limbs(a));
            x[ch.b..ch.b + LIMBS].copy_from_slice(&limbs(b));
            for layer in &layers {
                layer.forward(&mut x, 1e-6, &order);
            }
            word(&x[ch.r..ch.r + LIMBS])
        };
        // Every limb pair in every limb (the largest columns and carries: 0xff everywhere).
        for x in 0..256u32 {
            for y in 0..256u32 {
                let (a, b) = (x * 0x0101_0101, y * 0x0101_0101);
                assert_eq!(run(a, b), Some(Alu::Mul.eval(a, b)), "{a:#x} * {b:#x}");
            }
        }
        let mut rng = Rng::new(5);
        for _ in 0..20_000 {
            let (a, b) = (rng.next_u64() as u32, (rng.next_u64() >> 32) as u32);
            assert_eq!(run(a, b), Some(a.wrapping_mul(b)), "{a:#x} * {b:#x}");
        }
    }
}
