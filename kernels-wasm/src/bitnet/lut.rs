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
            let (lo, hi) = split_bytes(&entries(&PAIR_WEIGHTS, pair));
            table[..16].copy_from_slice(&hi);
            table[16..].copy_from_slice(&lo);
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

/// The TL2 tables of one activation row: one per weight triplet of the `three_k` columns, then
/// one per pair of the rest.
///
/// Triplet table entry `e` (0–13) holds `w0·a0 + w1·a1 + w2·a2` for the triplet whose
/// `9·w0 + 3·w1 + w2 = e`; a negative triplet value is the negated entry (the kernel applies the
/// sign bit), so 14 entries cover all 27 triplets. Both kinds store the low bytes first (bytes
/// 0–15), then the high bytes (16–31): the opposite of TL1, as bitnet.cpp's TL2 kernel reads them.
/// With −128 allowed an entry stays within ±384 and a 64-triplet block sum within ±24,576, so
/// TL2 takes every int8.
#[derive(Debug, Clone, PartialEq)]
pub struct Tl2Tables {
    /// `three_k / 3` triplet tables of [`PAIR_TABLE_BYTES`].
    pub three: Vec<u8>,
    /// `(K − three_k) / 2` pair tables, entries in TL1's order.
    pub two: Vec<u8>,
    pub scale: f32,
}

impl Tl2Tables {
    /// `per_tensor_quant` (ties to even) then the tables, `three_k` columns through triplets.
    pub fn build(x: &[f32], three_k: usize) -> Result<Self, BitnetError> {
        Self::from_quantized(&quantize_activations(x, Rounding::HalfEven)?, three_k)
    }

    pub fn from_quantized(acts: &QuantActs, three_k: usize) -> Result<Self, BitnetError> {
        let k = acts.q.len();
        if three_k > k || !three_k.is_multiple_of(3) || !(k - three_k).is_multiple_of(2) {
            return Err(BitnetError::Length { what: "activations (TL2 split)", expected: three_k, got: k });
        }
        let (head, tail) = acts.q.split_at(three_k);
        let mut three = vec![0u8; three_k / 3 * PAIR_TABLE_BYTES];
        for (table, a) in three.chunks_exact_mut(PAIR_TABLE_BYTES).zip(head.chunks_exact(3)) {
            let (lo, hi) = split_bytes(&entries(&TRIPLET_WEIGHTS, a));
            table[..16].copy_from_slice(&lo);
            table[16..].copy_from_slice(&hi);
        }
        let mut two = vec![0u8; tail.len() / 2 * PAIR_TABLE_BYTES];
        for (table, a) in two.chunks_exact_mut(PAIR_TABLE_BYTES).zip(tail.chunks_exact(2)) {
            let (lo, hi) = split_bytes(&entries(&PAIR_WEIGHTS, a));
            table[..16].copy_from_slice(&lo);
            table[16..].copy_from_slice(&hi);
        }
        Ok(Tl2Tables { three, two, scale: acts.scale })
    }

    /// The int16 entry `e` of triplet table `tr`.
    #[inline]
    pub fn triplet_entry(&self, tr: usize, e: u8) -> i16 {
        low_first(&self.three[tr * PAIR_TABLE_BYTES..], e)
    }

    /// The int16 entry `e` of pair table `p` (counted from `three_k`).
    #[inline]
    pub fn pair_entry(&self, p: usize, e: u8) -> i16 {
        low_first(&self.two[p * PAIR_TABLE_BYTES..], e)
    }
}

/// The weights each table entry stands for, one array per weight position: pair entry `e` is
/// `(e / 3 − 1, e % 3 − 1)` for `e < 9`; triplet entry `e` the triplet of value `e` for `e < 14`.
/// Unused entries have all-zero weights, so they come out 0.
const PAIR_WEIGHTS: [[i16; 16]; 2] = {
    let mut w = [[0i16; 16]; 2];
    let mut e = 0;
    while e < 9 {
        w[0][e] = (e / 3) as i16 - 1;
        w[1][e] = (e % 3) as i16 - 1;
        e += 1;
    }
    w
};
const TRIPLET_WEIGHTS: [[i16; 16]; 3] = {
    let mut w = [[0i16; 16]; 3];
    let mut e = 0;
    while e < 14 {
        let u = e + 13; // 9·(w0+1) + 3·(w1+1) + (w2+1)
        w[0][e] = (u / 9) as i16 - 1;
        w[1][e] = (u / 3 % 3) as i16 - 1;
        w[2][e] = (u % 3) as i16 - 1;
        e += 1;
    }
    w
};

/// The 16 entries of one table: Σ weight·activation per entry, written as whole fixed-size
/// arrays so the compiler builds them with vector multiplies (this is `lut_ctor`'s inner loop).
#[inline]
fn entries<const N: usize>(weights: &[[i16; 16]; N], a: &[i8]) -> [i16; 16] {
    let mut v = [0i16; 16];
    for (w, &a) in weights.iter().zip(a) {
        for e in 0..16 {
            v[e] += w[e] * a as i16;
        }
    }
    v
}

/// The low and the high bytes of the 16 entries.
#[inline]
fn split_bytes(v: &[i16; 16]) -> ([u8; 16], [u8; 16]) {
    let (mut lo, mut hi) = ([0u8; 16], [0u8; 16]);
    for e in 0..16 {
        lo[e] = v[e] as u8;
        hi[e] = (v[e] >> 8) as u8;
    }
    (lo, hi)
}

#[inline]
fn low_first(t: &[u8], e: u8) -> i16 {
    i16::from_le_bytes([t[e as usize], t[16 + e as usize]])
}

/// A triplet's value `9·w0 + 3·w1 + w2` (−13..=13): balanced ternary, so every triplet has its own.
#[inline]
pub fn triplet_value(w: [i8; 3]) -> i8 {
    9 * w[0] + 3 * w[1] + w[2]
}

/// The triplet with value `v` (the inverse of [`triplet_value`]).
#[inline]
pub fn triplet_weights(v: i8) -> [i8; 3] {
    let u = (v + 13) as u8; // 9·(w0+1) + 3·(w1+1) + (w2+1)
    [(u / 9) as i8 - 1, (u / 3 % 3) as i8 - 1, (u % 3) as i8 - 1]
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

    #[test]
    fn triplet_values_are_a_bijection() {
        let mut seen = [false; 27];
        for v in -13i8..=13 {
            let w = triplet_weights(v);
            assert!(w.iter().all(|x| (-1..=1).contains(x)));
            assert_eq!(triplet_value(w), v);
            seen[(v + 13) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn tl2_entries_are_the_weighted_sums_they_name() {
        let q: Vec<i8> = vec![127, -128, -127, 5, 0, 1, 127, -128, 3, -3];
        let t = Tl2Tables::from_quantized(&QuantActs { q: q.clone(), scale: 1.0 }, 6).unwrap();
        assert_eq!((t.three.len(), t.two.len()), (2 * 32, 2 * 32));
        for tr in 0..2 {
            for v in -13i8..=13 {
                let w = triplet_weights(v);
                let expected: i16 = (0..3).map(|i| w[i] as i16 * q[3 * tr + i] as i16).sum();
                let looked = t.triplet_entry(tr, v.unsigned_abs());
                assert_eq!(if v < 0 { -looked } else { looked }, expected, "triplet {tr} value {v}");
            }
            assert_eq!((t.triplet_entry(tr, 14), t.triplet_entry(tr, 15)), (0, 0));
        }
        for p in 0..2 {
            for (w0, w1) in [(-1i8, -1i8), (1, 0), (0, 1), (1, -1), (0, 0)] {
                let expected = w0 as i16 * q[6 + 2 * p] as i16 + w1 as i16 * q[7 + 2 * p] as i16;
                assert_eq!(t.pair_entry(p, pair_index(w0, w1)), expected);
            }
        }
        assert!(Tl2Tables::from_quantized(&QuantActs { q: vec![0; 9], scale: 1.0 }, 6).is_err());
        assert!(Tl2Tables::from_quantized(&QuantActs { q: vec![0; 9], scale: 1.0 }, 12).is_err());
    }
}
