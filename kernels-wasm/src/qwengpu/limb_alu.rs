//! One lane's ALU for the second machine (issue #22): every operation of `isa::Alu` but the
//! divisions, and every comparison of `isa::Cmp`, on one residual stream side by side. Each
//! operation's layers are merged into the same layers as the others' (its `i`-th layer's units
//! join the stack's `i`-th), so the depth is the deepest operation's and the width is the sum.
//! Its size is what a compiled layer budget (64 layers, 8,192 channels) has to hold per lane.

use super::isa::{Alu, Cmp};
use super::limb_bits::{logic, shift, to_bits, Logic, Shift, ShiftChannels};
use super::limb_mul::{mul, scratch_len, MulChannels, Product};
use super::limbs::{adder, compare, min_max, AdderChannels, CompareChannels, Layer, LIMBS};
use alloc::vec::Vec;

/// An operation the stack computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Alu(Alu),
    Cmp(Cmp),
}

impl Op {
    pub fn eval(self, a: u32, b: u32) -> u32 {
        match self {
            Op::Alu(op) => op.eval(a, b),
            Op::Cmp(c) => c.eval(a, b),
        }
    }
}

/// The merged layers, where the operands go and where each result is read.
pub struct AluStack {
    pub layers: Vec<Layer>,
    /// The stream's width: a power of four at or above the channels used (the norm's argument).
    pub d: usize,
    pub channels: usize,
    pub a: usize,
    pub b: usize,
    /// Each operation's result: limbs from that channel (a comparison: one 0/1 channel).
    pub results: Vec<(Op, usize)>,
}

/// The size of a stack of layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub depth: usize,
    pub hidden_units: usize,
    /// Nonzero weights: every gate, up and down entry.
    pub nonzero: usize,
}

impl AluStack {
    pub fn build() -> AluStack {
        let (a, b) = (1, 1 + LIMBS);
        let mut next = 1 + 2 * LIMBS;
        let mut alloc = |n: usize| {
            next += n;
            next - n
        };
        let mut layers: Vec<Layer> = Vec::new();
        let mut merge = |op_layers: Vec<Layer>| {
            for (i, l) in op_layers.into_iter().enumerate() {
                if layers.len() <= i {
                    layers.push(Layer::default());
                }
                layers[i].units.extend(l.units);
            }
        };
        let mut results = Vec::new();
        for (op, subtract) in [(Alu::Add, false), (Alu::Sub, true)] {
            let ch = AdderChannels { a, b, r: alloc(LIMBS), scratch: alloc(2 * LIMBS) };
            merge(adder(ch, subtract).into());
            results.push((Op::Alu(op), ch.r));
        }
        let (a_bits, b_bits) = (alloc(32), alloc(32));
        let mut bit_layers = [to_bits(a, a_bits), Layer::default()];
        bit_layers[0].units.extend(to_bits(b, b_bits).units);
        for (op, l) in [(Alu::And, Logic::And), (Alu::Or, Logic::Or), (Alu::Xor, Logic::Xor)] {
            let r = alloc(LIMBS);
            bit_layers[1].units.extend(logic(l, a_bits, b_bits, r).units);
            results.push((Op::Alu(op), r));
        }
        merge(bit_layers.into());
        for (op, s) in [(Alu::Shl, Shift::Shl), (Alu::Shr, Shift::Shr), (Alu::Sra, Shift::Sra)] {
            let ch = ShiftChannels { a, b, r: alloc(LIMBS), scratch: alloc(65) };
            merge(shift(s, ch).into());
            results.push((Op::Alu(op), ch.r));
        }
        let compare_channels = |alloc: &mut dyn FnMut(usize) -> usize| CompareChannels {
            adder: AdderChannels { a, b, r: 0, scratch: alloc(2 * LIMBS) },
            extra: alloc(5),
            d: alloc(1),
        };
        for c in [Cmp::Eq, Cmp::Ne, Cmp::LtS, Cmp::LeS, Cmp::GtS, Cmp::GeS, Cmp::LtU, Cmp::LeU, Cmp::GtU, Cmp::GeU] {
            let ch = compare_channels(&mut alloc);
            merge(compare(c, ch).into());
            results.push((Op::Cmp(c), ch.d));
        }
        for op in [Alu::MinS, Alu::MaxS, Alu::MinU, Alu::MaxU] {
            let (ch, r) = (compare_channels(&mut alloc), alloc(LIMBS));
            merge(min_max(op, ch, r).map(Vec::from).unwrap_or_default());
            results.push((Op::Alu(op), r));
        }
        for (op, which) in
            [(Alu::Mul, Product::Low), (Alu::MulHiU, Product::HighUnsigned), (Alu::MulHiS, Product::HighSigned)]
        {
            let ch = MulChannels { a, b, r: alloc(LIMBS), scratch: alloc(scratch_len(which)) };
            merge(mul(ch, which));
            results.push((Op::Alu(op), ch.r));
        }
        let channels = next;
        let d = core::iter::successors(Some(4usize), |d| Some(d * 4)).find(|&d| d >= channels).unwrap_or(channels);
        AluStack { layers, d, channels, a, b, results }
    }

    pub fn size(&self) -> Size {
        let units = self.layers.iter().flat_map(|l| &l.units);
        Size {
            depth: self.layers.len(),
            hidden_units: units.clone().count(),
            nonzero: units.map(|u| u.gate.len() + u.up.len() + u.down.len()).sum(),
        }
    }

    /// Every result for the operands `a` and `b`, in [`Self::results`]' order.
    pub fn run(&self, a: u32, b: u32) -> Vec<(Op, Option<u32>)> {
        let x = super::limbs::run_on(&self.layers, self.d, (self.a, a), (self.b, b));
        let read = |op: Op, at: usize| match op {
            Op::Cmp(_) => (x[at] == 0.0 || x[at] == 1.0).then_some(x[at] as u32),
            Op::Alu(_) => super::limbs::word(&x[at..at + LIMBS]),
        };
        self.results.iter().map(|&(op, at)| (op, read(op, at))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn every_operation_side_by_side_on_one_stream_matches_the_isa() {
        let stack = AluStack::build();
        assert_eq!(stack.results.len(), (19 - 4) + 10, "every Alu operation but the four divisions, every Cmp");
        assert!(stack.d >= stack.channels && stack.d.is_power_of_two() && stack.d.trailing_zeros().is_multiple_of(2));
        assert_eq!(stack.size().depth, 12);
        let edges = [0, 1, 0x7f, 0x80, 0xff, 31, 32, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff];
        let mut rng = Rng::new(3);
        // Half the random amounts below 40, so the shifts see small amounts as well as large.
        let random: Vec<(u32, u32)> = (0..300)
            .map(|i| (rng.next_u64() as u32, (rng.next_u64() >> 32) as u32 % if i % 2 == 0 { u32::MAX } else { 40 }))
            .collect();
        let pairs = edges.iter().flat_map(|&a| edges.iter().map(move |&b| (a, b)));
        for (a, b) in pairs.chain(random) {
            for (op, got) in stack.run(a, b) {
                assert_eq!(got, Some(op.eval(a, b)), "{op:?} {a:#x} {b:#x}");
            }
        }
    }
}
