//! The ALU as Qwen3.5 MLP sublayers (`x + W_down·(silu(W_gate·n) ⊙ W_up·n)`, `n = RMSNorm(x)`,
//! no biases), with computed weights: first the 32-bit adder, eight layers, one per nibble.
//!
//! Why it is exact in f32:
//! - Every channel of the residual stream is ±64: a one-hot digit is +64 at its value and −64
//!   elsewhere, "not yet computed" is all −64, a constant channel is +64. The mean square is
//!   therefore 4096 at every layer, whatever the data; ε = 1e-6 is lost in rounding, and RMSNorm
//!   multiplies by exactly 1/64 (then by its weight 1): the normalised stream is ±1.
//! - A hidden unit is an AND of three one-hot inputs (digit i of a, digit j of b, carry c):
//!   gate `= 128·(a_i + b_j + c − 2)` is +128 when all three are hot and −128 or less otherwise.
//!   `silu(128) = 128` (sigmoid rounds to 1) and `silu(−128) = −0` (`exp(128)` overflows f32,
//!   so sigmoid is exactly 0): no leakage at all. `up` is the constant channel (1).
//! - `W_down` sends each hidden unit to its sum digit `(i + j + c) mod 16` and its carry: a +128
//!   step that turns that channel from −64 to +64, exactly once per group.

use alloc::vec;
use alloc::vec::Vec;

/// ± of every channel.
pub const A: f32 = 64.0;

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// One MLP sublayer with its RMSNorm.
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    pub d_model: usize,
    pub hidden: usize,
    pub norm: Vec<f32>,
    pub eps: f32,
    /// `hidden × d_model` each, and `d_model × hidden`.
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
}

impl Mlp {
    /// `x += W_down·(silu(W_gate·n) ⊙ W_up·n)`, `n = x / sqrt(mean(x²) + ε) · w`.
    pub fn forward(&self, x: &mut [f32]) {
        let ms = x.iter().fold(0.0, |acc, v| acc + v * v) / x.len() as f32;
        let r = 1.0 / (ms + self.eps).sqrt();
        let n: Vec<f32> = x.iter().zip(&self.norm).map(|(v, w)| v * r * w).collect();
        let dot = |row: &[f32]| row.iter().zip(&n).fold(0.0, |acc, (a, b)| acc + a * b);
        let h: Vec<f32> = (0..self.hidden)
            .map(|u| {
                let row = u * self.d_model..(u + 1) * self.d_model;
                silu(dot(&self.gate[row.clone()])) * dot(&self.up[row])
            })
            .collect();
        for (o, xo) in x.iter_mut().enumerate() {
            *xo +=
                self.down[o * self.hidden..(o + 1) * self.hidden].iter().zip(&h).fold(0.0, |acc, (w, v)| acc + w * v);
        }
    }

    pub fn parameters(&self) -> usize {
        self.norm.len() + self.gate.len() + self.up.len() + self.down.len()
    }
}

/// The adder's residual stream: a and b (8 one-hot nibbles each), carries into nibbles 0–8,
/// the sum's nibbles, a constant.
pub mod stream {
    pub const LHS: usize = 0;
    pub const RHS: usize = 128;
    pub const CARRY: usize = 256; // 9 × 2
    pub const SUM: usize = 274;
    pub const ONE: usize = 402;
    pub const D: usize = 403;
}

/// Writes a word's nibbles one-hot (±A) at `at`.
pub fn put_word(x: &mut [f32], at: usize, word: u32) {
    for k in 0..8 {
        for d in 0..16 {
            x[at + 16 * k + d] = if ((word >> (4 * k)) & 15) as usize == d { A } else { -A };
        }
    }
}

/// The word at `at`, if every nibble has exactly one +A and the rest −A.
pub fn get_word(x: &[f32], at: usize) -> Option<u32> {
    let mut word = 0;
    for k in 0..8 {
        let g = &x[at + 16 * k..at + 16 * k + 16];
        let hot: Vec<usize> = (0..16).filter(|&d| g[d] == A).collect();
        if hot.len() != 1 || g.iter().any(|&v| v != A && v != -A) {
            return None;
        }
        word |= (hot[0] as u32) << (4 * k);
    }
    Some(word)
}

/// The stream before the adder: `a`, `b`, carry into nibble 0 = 0, everything else −A.
pub fn adder_input(a: u32, b: u32) -> Vec<f32> {
    let mut x = vec![-A; stream::D];
    put_word(&mut x, stream::LHS, a);
    put_word(&mut x, stream::RHS, b);
    x[stream::CARRY] = A; // carry 0 is hot
    x[stream::ONE] = A;
    x
}

/// The eight layers of the 32-bit adder: layer k adds nibble k with the carry from nibble k − 1.
pub fn adder() -> Vec<Mlp> {
    use stream::*;
    let hidden = 16 * 16 * 2;
    (0..8)
        .map(|k| {
            let (mut gate, mut up, mut down) = (vec![0.0; hidden * D], vec![0.0; hidden * D], vec![0.0; D * hidden]);
            for i in 0..16 {
                for j in 0..16 {
                    for c in 0..2 {
                        let u = (i * 16 + j) * 2 + c;
                        let g = &mut gate[u * D..(u + 1) * D];
                        g[LHS + 16 * k + i] = 128.0;
                        g[RHS + 16 * k + j] = 128.0;
                        g[CARRY + 2 * k + c] = 128.0;
                        g[ONE] = -256.0;
                        up[u * D + ONE] = 1.0;
                        let s = i + j + c;
                        down[(SUM + 16 * k + s % 16) * hidden + u] = 1.0;
                        down[(CARRY + 2 * (k + 1) + s / 16) * hidden + u] = 1.0;
                    }
                }
            }
            Mlp { d_model: D, hidden, norm: vec![1.0; D], eps: 1e-6, gate, up, down }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn eight_mlp_layers_add_32_bit_words_exactly() {
        let layers = adder();
        let mut rng = Rng::new(5);
        let edge = [(0, 0), (u32::MAX, 1), (u32::MAX, u32::MAX), (0x8000_0000, 0x8000_0000), (0x0fff_ffff, 1)];
        let random: Vec<(u32, u32)> = (0..100).map(|_| (rng.next_u64() as u32, rng.next_u64() as u32)).collect();
        for (a, b) in edge.into_iter().chain(random) {
            let mut x = adder_input(a, b);
            for l in &layers {
                l.forward(&mut x);
                // The invariant the exactness rests on: every channel is still ±64.
                assert!(x.iter().all(|&v| v == A || v == -A), "{a:#x} + {b:#x}");
            }
            assert_eq!(get_word(&x, stream::SUM), Some(a.wrapping_add(b)), "{a:#x} + {b:#x}");
            // The carry out of the top nibble is the 33rd bit.
            let carry = x[stream::CARRY + 16 + 1] == A;
            assert_eq!(carry, a.checked_add(b).is_none(), "{a:#x} + {b:#x}");
        }
    }
}
