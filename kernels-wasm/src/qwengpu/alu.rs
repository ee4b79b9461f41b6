//! The ALU as Qwen3.5 MLP sublayers (`x + W_down·(silu(W_gate·n) ⊙ W_up·n)`, `n = RMSNorm(x)`,
//! no biases), with computed weights: a chain of eight layers, one per nibble, each a lookup table
//! of (digit of a, digit of b, carry in) → (digit out, carry out). Add, subtract (the carry is the
//! borrow), the bitwise operations (no carry) and the unsigned comparison (the final borrow) are
//! such tables.
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

/// The chain's residual stream: a and b (8 one-hot nibbles each), carries into nibbles 0–8,
/// the result's nibbles, a constant.
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

/// The stream before a chain: `a`, `b`, carry into nibble 0 = 0, everything else −A.
pub fn chain_input(a: u32, b: u32) -> Vec<f32> {
    let mut x = vec![-A; stream::D];
    put_word(&mut x, stream::LHS, a);
    put_word(&mut x, stream::RHS, b);
    x[stream::CARRY] = A; // carry 0 is hot
    x[stream::ONE] = A;
    x
}

/// A nibble-wise operation: (digit of a, digit of b, carry in) → (digit out, carry out).
pub type NibbleOp = fn(usize, usize, usize) -> (usize, usize);

pub const ADD: NibbleOp = |a, b, c| ((a + b + c) % 16, (a + b + c) / 16);
/// `a − b − borrow`; the carry is the borrow.
pub const SUB: NibbleOp = |a, b, c| if a >= b + c { (a - b - c, 0) } else { (a + 16 - b - c, 1) };
pub const AND: NibbleOp = |a, b, _| (a & b, 0);
pub const OR: NibbleOp = |a, b, _| (a | b, 0);
pub const XOR: NibbleOp = |a, b, _| (a ^ b, 0);

/// The eight layers of a 32-bit operation: layer k applies `op` to nibble k and the carry out
/// of nibble k − 1.
pub fn chain(op: NibbleOp) -> Vec<Mlp> {
    chain_at(op, 0, stream::D, stream::ONE)
}

/// [`chain`] on a wider stream of `D` channels whose constant is channel `ONE`, with the
/// chain's operands, carries and result at `base` (laid out as in [`stream`]).
#[allow(non_snake_case)]
pub fn chain_at(op: NibbleOp, base: usize, D: usize, ONE: usize) -> Vec<Mlp> {
    let (LHS, RHS, CARRY, SUM) = (base + stream::LHS, base + stream::RHS, base + stream::CARRY, base + stream::SUM);
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
                        let (digit, carry) = op(i, j, c);
                        down[(SUM + 16 * k + digit) * hidden + u] = 1.0;
                        down[(CARRY + 2 * (k + 1) + carry) * hidden + u] = 1.0;
                    }
                }
            }
            Mlp { d_model: D, hidden, norm: vec![1.0; D], eps: 1e-6, gate, up, down }
        })
        .collect()
}

/// The 32-bit adder.
pub fn adder() -> Vec<Mlp> {
    chain(ADD)
}

/// Runs a chain: the result word and the final carry.
pub fn run_chain(layers: &[Mlp], a: u32, b: u32) -> (Option<u32>, bool) {
    let mut x = chain_input(a, b);
    for l in layers {
        l.forward(&mut x);
    }
    (get_word(&x, stream::SUM), x[stream::CARRY + 16 + 1] == A)
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
            let mut x = chain_input(a, b);
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

    /// Subtraction, the bitwise operations and the unsigned comparison (the final borrow of the
    /// subtraction chain) from the same table-layer construction.
    #[test]
    fn the_chain_computes_sub_logic_and_comparisons() {
        let mut rng = Rng::new(6);
        let pairs: Vec<(u32, u32)> = [(0, 1), (5, 5), (u32::MAX, 0)]
            .into_iter()
            .chain((0..30).map(|_| (rng.next_u64() as u32, rng.next_u64() as u32)))
            .collect();
        type Word = fn(u32, u32) -> u32;
        let ops: [(&str, NibbleOp, Word); 4] = [
            ("sub", SUB, u32::wrapping_sub),
            ("and", AND, |a, b| a & b),
            ("or", OR, |a, b| a | b),
            ("xor", XOR, |a, b| a ^ b),
        ];
        for (name, op, want) in ops {
            let layers = chain(op);
            for &(a, b) in &pairs {
                let (got, borrow) = run_chain(&layers, a, b);
                assert_eq!(got, Some(want(a, b)), "{name} {a:#x}, {b:#x}");
                if name == "sub" {
                    assert_eq!(borrow, a < b, "{a:#x} < {b:#x}");
                }
            }
        }
    }
}
