//! The compiled pieces composed: a register file in Gated DeltaNet state rows feeding the ALU's
//! MLP chain, as decoder layers on one residual stream (`x += layer(RMSNorm(x))`), token by
//! token. Each token is one instruction `r_d = r_a + r_b`; it also carries the previous
//! instruction's result as a pending write, which the register-file layers apply before they
//! read (a DeltaNet step writes, then reads), so an instruction sees its predecessor's result.
//!
//! Two register-file layers hold identical copies (both apply every write); the first reads
//! `r_a` into the adder's left operand, the second `r_b` into the right. Every channel of the
//! stream is ±64 throughout (see `alu`): the read lands on a −64 channel as +128·o with o ∈ {0, 1}
//! and the write value is `(M/2)·(n + 1)` of the normalised ±1 digit: 0 or M. All exact.

use super::alu::{self, chain_at, get_word, put_word, Mlp, A};
use super::deltanet::DeltaNet;
use super::memory::{decode_row, exact_weights, M, ROWS, WORD};
use alloc::vec;
use alloc::vec::Vec;

/// Registers in the file.
pub const REGS: usize = 16;
/// The stream: constant, read addresses a and b, pending write address and value, then the
/// ALU chain's operands, carries and result.
pub const ONE: usize = 0;
pub const RA: usize = 1;
pub const RB: usize = RA + REGS;
pub const PW: usize = RB + REGS;
pub const PV: usize = PW + REGS;
pub const BASE: usize = PV + WORD;
pub const D: usize = BASE + alu::stream::ONE;

/// RMSNorm with weight 1 (the stream's mean square is always 4096: an exact ×1/64).
fn rms_norm(x: &[f32]) -> Vec<f32> {
    let ms = x.iter().fold(0.0, |acc, v| acc + v * v) / x.len() as f32;
    let r = 1.0 / (ms + 1e-6).sqrt();
    x.iter().map(|v| v * r).collect()
}

/// A register-file layer that reads the register named at `read` into the word at `into`.
fn register_file(read: usize, into: usize) -> DeltaNet {
    let (dk, dv) = (ROWS, WORD);
    let channels = 2 * dk + dv;
    let mut w_qkv = vec![0.0; channels * D];
    for i in 0..REGS {
        // (M/2)·(n + 1): M where the normalised one-hot is +1, 0 where it is −1.
        w_qkv[i * D + read + i] = M / 2.0;
        w_qkv[i * D + ONE] = M / 2.0;
        w_qkv[(dk + i) * D + PW + i] = M / 2.0;
        w_qkv[(dk + i) * D + ONE] = M / 2.0;
    }
    for j in 0..dv {
        w_qkv[(2 * dk + j) * D + PV + j] = M / 2.0;
        w_qkv[(2 * dk + j) * D + ONE] = M / 2.0;
    }
    // The read word's one-hot (0/1) lands on channels that hold −64: +128 makes the hot one +64.
    let mut w_out = vec![0.0; D * dv];
    for j in 0..dv {
        w_out[(into + j) * dv + j] = 2.0 * A;
    }
    DeltaNet::new(exact_weights(D, ONE, w_qkv, w_out))
}

/// The compiled adder machine: two register-file layers and the eight ALU layers.
pub struct AddMachine {
    pub files: [DeltaNet; 2],
    pub alu: Vec<Mlp>,
}

impl AddMachine {
    pub fn new() -> Self {
        let files = [register_file(RA, BASE + alu::stream::LHS), register_file(RB, BASE + alu::stream::RHS)];
        AddMachine { files, alu: chain_at(alu::ADD, BASE, D, ONE) }
    }

    /// One token: apply the pending write (if any), then `r_a + r_b`; returns the sum.
    pub fn step(&mut self, a: usize, b: usize, pending: Option<(usize, u32)>) -> Option<u32> {
        let mut x = vec![-A; D];
        x[ONE] = A;
        x[RA + a] = A;
        x[RB + b] = A;
        // No pending write: address and value stay all −64 (cold), so the key is 0.
        if let Some((r, v)) = pending {
            x[PW + r] = A;
            put_word(&mut x, PV, v);
        }
        x[BASE + alu::stream::CARRY] = A; // carry into nibble 0: 0
        for f in &mut self.files {
            let y = f.step(&rms_norm(&x));
            for (xi, yi) in x.iter_mut().zip(y) {
                *xi += yi;
            }
        }
        for l in &self.alu {
            l.forward(&mut x);
        }
        get_word(&x, BASE + alu::stream::SUM)
    }

    /// Register `r` as both files hold it.
    pub fn register(&self, r: usize) -> [Option<u32>; 2] {
        [decode_row(self.files[0].row(0, r), M), decode_row(self.files[1].row(0, r), M)]
    }
}

impl Default for AddMachine {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A random program of additions over 16 registers, token by token through the composed
    /// layers, against plain Rust: every sum, and both register files at the end, bit-exact.
    #[test]
    fn register_file_and_adder_compose_exactly() {
        let mut m = AddMachine::new();
        let mut rng = Rng::new(12);
        let mut regs = [0u32; REGS];
        // Loading: one token per register carries its initial value as the pending write.
        let mut pending = None;
        for (r, reg) in regs.iter_mut().enumerate() {
            *reg = rng.next_u64() as u32;
            m.step(0, 0, pending);
            pending = Some((r, *reg));
        }
        for step in 0..40 {
            let (a, b, d) =
                ((rng.next_u64() % 16) as usize, (rng.next_u64() % 16) as usize, (rng.next_u64() % 16) as usize);
            // The pending write lands before this instruction reads.
            if let Some((r, v)) = pending {
                regs[r] = v;
            }
            let want = regs[a].wrapping_add(regs[b]);
            assert_eq!(m.step(a, b, pending), Some(want), "step {step}: r{d} = r{a} + r{b}");
            pending = Some((d, want));
        }
        if let Some((r, v)) = pending {
            regs[r] = v;
        }
        m.step(0, 0, pending);
        for (r, &v) in regs.iter().enumerate() {
            assert_eq!(m.register(r), [Some(v), Some(v)], "register {r}");
        }
    }
}
