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
            let first = t * g.tile.bm_tile + rb * g.tile.bm;
            // int16 sums of 8 rows each; bm ≤ 64 rows.
            let mut acc = [_mm_setzero_si128(); 8];
            for v in g.vectors(t, kb, rb) {
                let bytes = _mm_loadu_si128(w.add(v.offset).cast());
                let (hi_idx, lo_idx) = (_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), _mm_and_si128(bytes, mask));
                let (t0, t1) = (lut.add(v.pair * 32), lut.add(v.pair * 32 + 32));
                let look = |table: *const u8, idx| _mm_shuffle_epi8(_mm_loadu_si128(table.cast()), idx);
                // Tables store high bytes first, then low bytes; little-endian int16 = (low, high).
                let (a_hi, a_lo) = (look(t0, hi_idx), look(t0.add(16), hi_idx));
                let (b_hi, b_lo) = (look(t1, lo_idx), look(t1.add(16), lo_idx));
                let rows_0_7 = _mm_add_epi16(_mm_unpacklo_epi8(a_lo, a_hi), _mm_unpacklo_epi8(b_lo, b_hi));
                let rows_8_15 = _mm_add_epi16(_mm_unpackhi_epi8(a_lo, a_hi), _mm_unpackhi_epi8(b_lo, b_hi));
                let j = (v.row0 - first) / 8;
                acc[j] = _mm_add_epi16(acc[j], rows_0_7);
                acc[j + 1] = _mm_add_epi16(acc[j + 1], rows_8_15);
            }
            let dst = &mut out[rb * g.tile.bm..(rb + 1) * g.tile.bm];
            for (j, a) in acc.iter().take(g.tile.bm / 8).enumerate() {
                let mut wide = [0i32; 8];
                _mm256_storeu_si256(wide.as_mut_ptr().cast(), _mm256_cvtepi16_epi32(*a));
                for (o, x) in dst[j * 8..j * 8 + 8].iter_mut().zip(wide) {
                    *o += x;
                }
            }
        }
    }
}
