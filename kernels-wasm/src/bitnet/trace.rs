//! A step-by-step record of the scalar kernels, for the playground's stepper: every packed byte
//! read, the nibbles in it, the table entries they select (with the sign bit applied for TL2),
//! the int16 partial sum of the row after the lookup, and the widening of the int16 sums into the
//! int32 accumulators at the end of each K block. Replaying a trace ([`Trace::state_at`]) gives
//! exactly the accumulators of `gemv_acc` (tested), so what the stepper shows is the kernel.

use super::i2s::I2sMatrix;
use super::lut::{pair_index, PairTables};
use super::tl1::Tl1Matrix;
use super::tl2::{row_of, Tl2Matrix, Tl2Tables, BM32};
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

/// One table lookup.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    /// Which table: the activation pair (TL1, TL2 tail) or triplet (TL2) index.
    pub group: usize,
    /// TL2's two-weight tail (pair tables) rather than its triplet tables.
    pub tail: bool,
    /// The 4-bit index read from the packed byte.
    pub nibble: u8,
    /// TL2: the sign bit was set, so the entry is negated.
    pub negate: bool,
    /// The value added to the row's int16 sum (after the sign).
    pub value: i16,
    /// The weight columns this lookup covers.
    pub cols: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// One packed byte of one row: two lookups (high nibble, then low nibble).
    Lookup { byte_offset: usize, byte: u8, lookups: [Lookup; 2] },
    /// End of a K block: the int16 sums of `rows` are added to their int32 accumulators.
    Widen { rows: Range<usize> },
    /// I2_S: one 128- (or 64-) weight block of one row by multiply-add, `Σ w·q` of the block.
    MultiplyAdd { cols: Range<usize>, dot: i32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The K block (`k_outer`; for TL2's tail, counted after the triplet blocks).
    pub block: usize,
    /// The output row (the first row for a widen step).
    pub row: usize,
    pub kind: StepKind,
}

/// The accumulators after some steps.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub partial: Vec<i16>,
    pub acc: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub rows: usize,
    pub cols: usize,
    pub steps: Vec<Step>,
}

impl Trace {
    /// TL1's `qgemm_lut`, in the scalar kernel's order: K block, row block, vector, row.
    pub fn tl1(m: &Tl1Matrix, tables: &PairTables) -> Trace {
        let g = &m.geometry;
        let mut steps = Vec::new();
        for t in 0..g.tiles() {
            for kb in 0..g.k_blocks() {
                for rb in 0..g.row_blocks() {
                    for v in g.vectors(t, kb, rb) {
                        for r in 0..16 {
                            let byte = m.packed[v.offset + r];
                            let look = |p: usize, nibble: u8| Lookup {
                                group: p,
                                tail: false,
                                nibble,
                                negate: false,
                                value: tables.entry(p, nibble),
                                cols: 2 * p..2 * p + 2,
                            };
                            let lookups = [look(v.pair, byte >> 4), look(v.pair + 1, byte & 15)];
                            let kind = StepKind::Lookup { byte_offset: v.offset + r, byte, lookups };
                            steps.push(Step { block: kb, row: v.row0 + r, kind });
                        }
                    }
                    let first = t * g.tile.bm_tile + rb * g.tile.bm;
                    steps.push(Step {
                        block: kb,
                        row: first,
                        kind: StepKind::Widen { rows: first..first + g.tile.bm },
                    });
                }
            }
        }
        Trace { rows: g.m, cols: g.k, steps }
    }

    /// TL2: per row block, the triplet blocks then the tail blocks, as the scalar kernel runs.
    pub fn tl2(m: &Tl2Matrix, tables: &Tl2Tables) -> Trace {
        let g = &m.geometry;
        let mut steps = Vec::new();
        for t in 0..g.tiles() {
            for rb in 0..g.row_blocks() {
                let first = t * g.tile.bm_tile + rb * BM32;
                let widen = |block| Step { block, row: first, kind: StepKind::Widen { rows: first..first + BM32 } };
                for kb in 0..g.k_blocks() {
                    for sb in 0..g.vectors_per_block() {
                        let (off, tr) = (g.mag_offset(t, kb, rb, sb), g.triplet(kb, sb));
                        let signs = &m.packed[g.sign_offset(t, kb, rb, sb / 4)..][..32];
                        for pos in 0..32 {
                            let row = row_of(pos);
                            let lane = u16::from_le_bytes([signs[2 * (row % 16)], signs[2 * (row % 16) + 1]]);
                            let byte = m.packed[off + pos];
                            let look = |tr: usize, nibble: u8, a: usize| {
                                let negate = lane >> (15 - a) & 1 == 1;
                                let e = tables.triplet_entry(tr, nibble);
                                let value = if negate { -e } else { e };
                                Lookup { group: tr, tail: false, nibble, negate, value, cols: 3 * tr..3 * tr + 3 }
                            };
                            let top = 4 * (sb % 4) + row / 16;
                            let lookups = [look(tr, byte >> 4, top), look(tr + 1, byte & 15, top + 2)];
                            let kind = StepKind::Lookup { byte_offset: off + pos, byte, lookups };
                            steps.push(Step { block: kb, row: first + row, kind });
                        }
                    }
                    steps.push(widen(kb));
                }
                for kb in 0..g.tail_blocks() {
                    for sb in 0..8 {
                        let (off, p) = (g.tail_offset(t, kb, rb, sb), kb * 16 + 2 * sb);
                        for pos in 0..32 {
                            let byte = m.packed[off + pos];
                            let look = |p: usize, nibble: u8| {
                                let c = g.three_k + 2 * p;
                                let value = tables.pair_entry(p, nibble);
                                Lookup { group: p, tail: true, nibble, negate: false, value, cols: c..c + 2 }
                            };
                            let lookups = [look(p, byte >> 4), look(p + 1, byte & 15)];
                            let kind = StepKind::Lookup { byte_offset: off + pos, byte, lookups };
                            steps.push(Step { block: g.k_blocks() + kb, row: first + row_of(pos), kind });
                        }
                    }
                    steps.push(widen(g.k_blocks() + kb));
                }
            }
        }
        Trace { rows: g.m, cols: g.k, steps }
    }

    /// I2_S: row by row, block by block (no tables: the multiply-add kernel).
    pub fn i2s(m: &I2sMatrix, q: &[i8]) -> Trace {
        let block = m.layout.block();
        let w = m.unpack();
        let mut steps = Vec::new();
        for row in 0..m.rows {
            for b in 0..m.cols / block {
                let cols = b * block..(b + 1) * block;
                let dot =
                    w.row(row)[cols.clone()].iter().zip(&q[cols.clone()]).map(|(&w, &a)| w as i32 * a as i32).sum();
                steps.push(Step { block: b, row, kind: StepKind::MultiplyAdd { cols, dot } });
            }
        }
        Trace { rows: m.rows, cols: m.cols, steps }
    }

    /// The accumulators after steps `0..n`.
    pub fn state_at(&self, n: usize) -> State {
        let mut s = State { partial: vec![0; self.rows], acc: vec![0; self.rows] };
        for step in &self.steps[..n.min(self.steps.len())] {
            match &step.kind {
                StepKind::Lookup { lookups, .. } => {
                    s.partial[step.row] += lookups[0].value + lookups[1].value;
                }
                StepKind::Widen { rows } => {
                    for r in rows.clone() {
                        s.acc[r] += s.partial[r] as i32;
                        s.partial[r] = 0;
                    }
                }
                StepKind::MultiplyAdd { dot, .. } => s.acc[step.row] += dot,
            }
        }
        s
    }
}

/// What a table entry holds, for display: the weights it stands for (`None`: unused entry).
/// TL1 and TL2-tail tables: weight pairs; TL2 triplet tables: the triplet of value `e`.
pub fn entry_weights(triplet: bool, e: u8) -> Option<Vec<i8>> {
    match (triplet, e) {
        (false, 0..=8) => Some(vec![(e / 3) as i8 - 1, (e % 3) as i8 - 1]),
        (true, 0..=13) => Some(super::lut::triplet_weights(e as i8).to_vec()),
        _ => None,
    }
}

/// The TL1 index of a weight pair, re-exported for display code.
pub fn tl1_index(w0: i8, w1: i8) -> u8 {
    pair_index(w0, w1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::backend::Backend;
    use crate::bitnet::i2s::I2sLayout;
    use crate::bitnet::lut_matrix::LutMatrix;
    use crate::bitnet::quant::QuantActs;
    use crate::bitnet::testutil::{plain_dot, Rng};
    use crate::bitnet::tiling::Tile;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn replaying_a_trace_gives_the_kernels_accumulators() {
        let mut rng = Rng::new(41);
        for (m, k) in [(32, 64), (64, 128), (32, 96), (64, 224)] {
            let t = rng.ternary(m, k);
            let mut q = rng.acts(k);
            q.iter_mut().for_each(|v| *v = (*v).max(-127));
            let acts = QuantActs { q: q.clone(), scale: 1.0 };
            let expected = plain_dot(&t, &q);
            let mut acc = vec![0; m];
            if let Ok(p) = Tl1Matrix::pack_with(&t, Tile { bm_tile: 32, bk: 32, bm: 32 }) {
                let tables = PairTables::from_quantized(&acts).unwrap();
                p.gemv_acc(&tables, Backend::Scalar, &mut acc).unwrap();
                let trace = Trace::tl1(&p, &tables);
                assert_eq!(trace.steps.len(), m * k / 4 + (m / 32) * (k / 32));
                assert_eq!(trace.state_at(trace.steps.len()).acc, acc);
                assert_eq!(acc, expected);
            }
            if let Ok(p) = Tl2Matrix::pack(&t) {
                let tables = Tl2Tables::from_quantized(&acts, p.geometry.three_k).unwrap();
                p.gemv_acc(&tables, Backend::Scalar, &mut acc).unwrap();
                let trace = Trace::tl2(&p, &tables);
                let end = trace.state_at(usize::MAX);
                assert_eq!((end.acc, end.partial), (expected.clone(), vec![0; m]), "TL2 {m}x{k}");
            }
            if let Ok(p) = I2sMatrix::pack(&t, I2sLayout::X86) {
                assert_eq!(Trace::i2s(&p, &q).state_at(usize::MAX).acc, expected);
            }
        }
    }

    #[test]
    fn lookups_name_the_weights_they_cover() {
        let t = Rng::new(42).ternary(32, 96);
        let q = Rng::new(43).acts(96);
        let p = Tl2Matrix::pack(&t).unwrap();
        let tables = Tl2Tables::from_quantized(&QuantActs { q: q.clone(), scale: 1.0 }, 96).unwrap();
        for step in Trace::tl2(&p, &tables).steps {
            if let StepKind::Lookup { lookups, .. } = step.kind {
                for l in lookups {
                    let w = &t.row(step.row)[l.cols.clone()];
                    let mut named = entry_weights(true, l.nibble).unwrap();
                    if l.negate {
                        named.iter_mut().for_each(|v| *v = -*v);
                    }
                    assert_eq!(w, &named[..], "row {} cols {:?}", step.row, l.cols);
                    let dot: i16 = w.iter().zip(&q[l.cols.clone()]).map(|(&w, &a)| w as i16 * a as i16).sum();
                    assert_eq!(l.value, dot);
                }
            }
        }
        assert_eq!(entry_weights(false, 9), None);
        assert_eq!(entry_weights(true, 14), None);
        assert_eq!(entry_weights(false, tl1_index(1, -1)), Some(vec![1, -1]));
    }
}
