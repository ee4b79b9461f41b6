//! Deterministic random data (SplitMix64) for tests and benchmarks: ternary matrices, int8
//! activations, f32 vectors. Same seed, same data, on every platform.

use super::quant::TernaryMatrix;
use alloc::vec::Vec;

/// A seeded SplitMix64 generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// SplitMix64.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn ternary(&mut self, rows: usize, cols: usize) -> TernaryMatrix {
        let w = (0..rows * cols).map(|_| (self.next_u64() % 3) as i8 - 1).collect();
        TernaryMatrix { rows, cols, w, scale: 0.5 + (self.next_u64() % 1000) as f32 / 1000.0 }
    }

    pub fn acts(&mut self, n: usize) -> Vec<i8> {
        (0..n).map(|_| self.next_u64() as i8).collect()
    }

    pub fn f32s(&mut self, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|_| ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp).collect()
    }
}
