//! Lookup tables (`lut_ctor`): for every pair of activations, the 9 sums a pair of ternary
//! weights can produce, so the kernel replaces multiplications by table lookups.
//!
//! Entry `e = 3·(w0 + 1) + (w1 + 1)` holds `w0·a0 + w1·a1`, i.e. in order the weight pairs
//! (−1,−1) (−1,0) (−1,1) (0,−1) (0,0) (0,1) (1,−1) (1,0) (1,1); entries 9–15 are unused (0).
//! The int16 entries do not fit the 16-byte byte-shuffle instructions (`tbl`, `pshufb`,
//! `i8x16.swizzle`), so each table is stored as two 16-byte tables, as bitnet.cpp's TL1 stores
//! them: 32 bytes per pair, bytes 0–15 the high bytes (`v >> 8`), bytes 16–31 the low bytes.
//! Two lookups with the same 4-bit index and a byte zip rebuild the exact int16.

use super::quant::{quantize_activations, QuantActs, Rounding};
use super::BitnetError;
use alloc::vec;
use alloc::vec::Vec;

/// Bytes of one pair's table.
pub const PAIR_TABLE_BYTES: usize = 32;

/// The TL1 tables of one activation row.
#[derive(Debug, Clone, PartialEq)]
pub struct PairTables {
    /// `K / 2` tables of [`PAIR_TABLE_BYTES`].
    pub bytes: Vec<u8>,
    /// The activation scale (`127 / max|x|`): outputs are divided by it.
    pub scale: f32,
}

impl PairTables {
    /// `per_tensor_quant` then `lut_ctor`, with round-to-nearest-even as bitnet.cpp's LUT path.
    pub fn build(x: &[f32]) -> Result<Self, BitnetError> {
        Self::from_quantized(&quantize_activations(x, Rounding::HalfEven)?)
    }

    /// Activations must lie in −127..=127, as `per_tensor_quant` makes them: with −128 a
    /// (−1, −1) entry would be 256 and a BK = 256 block could overflow its int16 sum.
    pub fn from_quantized(acts: &QuantActs) -> Result<Self, BitnetError> {
        if let Some(index) = acts.q.iter().position(|&v| v == i8::MIN) {
            return Err(BitnetError::ActivationRange { index });
        }
        if !acts.q.len().is_multiple_of(2) {
            return Err(BitnetError::Length {
                what: "activations (TL1 needs pairs)",
                expected: acts.q.len() + 1,
                got: acts.q.len(),
            });
        }
        let mut bytes = vec![0u8; acts.q.len() / 2 * PAIR_TABLE_BYTES];
        for (table, pair) in bytes.chunks_exact_mut(PAIR_TABLE_BYTES).zip(acts.q.chunks_exact(2)) {
            let (a0, a1) = (pair[0] as i16, pair[1] as i16);
            for e in 0..9 {
                let (w0, w1) = ((e / 3) as i16 - 1, (e % 3) as i16 - 1);
                let v = w0 * a0 + w1 * a1;
                table[e] = (v >> 8) as u8;
                table[16 + e] = v as u8;
            }
        }
        Ok(PairTables { bytes, scale: acts.scale })
    }

    /// The int16 entry `e` of pair `p`, rebuilt from its two bytes.
    #[inline]
    pub fn entry(&self, p: usize, e: u8) -> i16 {
        let t = &self.bytes[p * PAIR_TABLE_BYTES..];
        i16::from_le_bytes([t[16 + e as usize], t[e as usize]])
    }
}

/// The 4-bit index of a weight pair.
#[inline]
pub fn pair_index(w0: i8, w1: i8) -> u8 {
    (3 * w0 + w1 + 4) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn every_entry_is_the_weighted_sum_it_names() {
        let q: Vec<i8> = vec![127, -127, -127, 127, 0, 5, -7, 0, 1, 1];
        let t = PairTables::from_quantized(&QuantActs { q: q.clone(), scale: 1.0 }).unwrap();
        for p in 0..q.len() / 2 {
            for w0 in -1i8..=1 {
                for w1 in -1i8..=1 {
                    let expected = w0 as i16 * q[2 * p] as i16 + w1 as i16 * q[2 * p + 1] as i16;
                    assert_eq!(t.entry(p, pair_index(w0, w1)), expected, "pair {p} ({w0},{w1})");
                }
            }
            for unused in 9..16 {
                assert_eq!(t.entry(p, unused), 0);
            }
        }
        assert!(PairTables::from_quantized(&QuantActs { q: vec![1, 2, 3], scale: 1.0 }).is_err());
        assert_eq!(
            PairTables::from_quantized(&QuantActs { q: vec![1, -128], scale: 1.0 }),
            Err(BitnetError::ActivationRange { index: 1 })
        );
    }
}
