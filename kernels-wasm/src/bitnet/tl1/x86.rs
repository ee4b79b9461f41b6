//! TL1 with `pshufb`: each 16-byte vector of indices (16 rows × 2 pairs) takes four byte
//! lookups (high and low table bytes, for each nibble plane) and two byte zips back to int16.

use super::{PairTables, Tl1Matrix};
use core::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2; `tables` and `out` sized as `gemv_acc_tiles` checks.
#[target_feature(enable = "avx2")]
pub unsafe fn tile_avx2(m: &Tl1Matrix, tables: &PairTables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    let (lut, w) = (tables.bytes.as_ptr(), m.packed.as_ptr());
    let mask = _mm_set1_epi8(0x0f);
    for kb in 0..g.k_blocks() {
        for rb in 0..g.row_blocks() {
            let base = g.block_offset(t, kb, rb);
            // int16 sums of 8 rows each; bm ≤ 64 rows.
            let mut acc = [_mm_setzero_si128(); 8];
            for sb in 0..g.tile.bk / g.by() {
                for h in 0..g.by() / 4 {
                    // The two pairs' tables serve every 16-row group of this step: load them once.
                    let p = lut.add(g.pair(kb, sb, h) * 32);
                    let load = |i: usize| _mm_loadu_si128(p.add(16 * i).cast());
                    let (t0_hi, t0_lo, t1_hi, t1_lo) = (load(0), load(1), load(2), load(3));
                    for gi in 0..g.tile.bm / 16 {
                        let bytes = _mm_loadu_si128(w.add(g.vector_offset(base, sb, gi, h)).cast());
                        let (hi_idx, lo_idx) =
                            (_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), _mm_and_si128(bytes, mask));
                        // Tables store high bytes first, then low bytes; little-endian int16 = (low, high).
                        let (a_hi, a_lo) = (_mm_shuffle_epi8(t0_hi, hi_idx), _mm_shuffle_epi8(t0_lo, hi_idx));
                        let (b_hi, b_lo) = (_mm_shuffle_epi8(t1_hi, lo_idx), _mm_shuffle_epi8(t1_lo, lo_idx));
                        let rows_0_7 = _mm_add_epi16(_mm_unpacklo_epi8(a_lo, a_hi), _mm_unpacklo_epi8(b_lo, b_hi));
                        let rows_8_15 = _mm_add_epi16(_mm_unpackhi_epi8(a_lo, a_hi), _mm_unpackhi_epi8(b_lo, b_hi));
                        acc[2 * gi] = _mm_add_epi16(acc[2 * gi], rows_0_7);
                        acc[2 * gi + 1] = _mm_add_epi16(acc[2 * gi + 1], rows_8_15);
                    }
                }
            }
            let dst = &mut out[rb * g.tile.bm..(rb + 1) * g.tile.bm];
            for (j, a) in acc.iter().take(g.tile.bm / 8).enumerate() {
                let p = dst.as_mut_ptr().add(8 * j).cast::<__m256i>();
                _mm256_storeu_si256(p, _mm256_add_epi32(_mm256_loadu_si256(p), _mm256_cvtepi16_epi32(*a)));
            }
        }
    }
}
