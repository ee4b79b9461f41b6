//! Deterministic test data: a seeded generator, random ternary matrices and int8 activations,
//! the edge cases every kernel must survive, and the plain reference dot product.

use super::quant::TernaryMatrix;
use alloc::vec::Vec;

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// SplitMix64.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn ternary(&mut self, rows: usize, cols: usize) -> TernaryMatrix {
        let w = (0..rows * cols).map(|_| (self.next() % 3) as i8 - 1).collect();
        TernaryMatrix { rows, cols, w, scale: 0.5 + (self.next() % 1000) as f32 / 1000.0 }
    }

    pub fn acts(&mut self, n: usize) -> Vec<i8> {
        (0..n).map(|_| self.next() as i8).collect()
    }

    pub fn f32s(&mut self, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp).collect()
    }
}

/// The weight patterns and activation vectors every kernel is checked on besides random ones.
pub fn edge_cases(rows: usize, cols: usize) -> Vec<(TernaryMatrix, Vec<i8>)> {
    let fill = |v: i8| TernaryMatrix { rows, cols, w: alloc::vec![v; rows * cols], scale: 1.0 };
    let mut rng = Rng::new(99);
    let alternating: Vec<i8> = (0..cols).map(|i| if i % 2 == 0 { 127 } else { -128 }).collect();
    alloc::vec![
        (fill(1), alloc::vec![127; cols]),
        (fill(-1), alloc::vec![127; cols]),
        (fill(1), alloc::vec![-128; cols]),
        (fill(-1), alloc::vec![-128; cols]),
        (fill(0), rng.acts(cols)),
        (rng.ternary(rows, cols), alloc::vec![0; cols]),
        (fill(1), alternating.clone()),
        (rng.ternary(rows, cols), alternating),
    ]
}

/// `Σ_k w[r][k]·q[k]` by the definition: the independent reference for every accumulator.
pub fn plain_dot(t: &TernaryMatrix, q: &[i8]) -> Vec<i32> {
    (0..t.rows).map(|r| t.row(r).iter().zip(q).map(|(&w, &a)| w as i32 * a as i32).sum()).collect()
}
