//! TL1 with `pshufb`: each 16-byte vector of indices (16 rows × 2 pairs) takes four byte
//! lookups (high and low table bytes, for each nibble plane) and two byte zips back to int16.
//! With BM = 32, two such vectors (the step's two pairs) go through one 32-byte register.

use super::{PairTables, Tl1Matrix};
use core::arch::x86_64::*;

/// `dst` (8 outputs) += the eight int16 sums in `a`, widened to int32.
#[inline(always)]
unsafe fn add_widened(dst: &mut [i32], a: __m128i) {
    assert_eq!(dst.len(), 8);
    let p = dst.as_mut_ptr().cast::<__m256i>();
    _mm256_storeu_si256(p, _mm256_add_epi32(_mm256_loadu_si256(p), _mm256_cvtepi16_epi32(a)));
}

/// # Safety
/// The CPU must support AVX2; `tables` and `out` sized as `gemv_acc_tiles` checks.
#[target_feature(enable = "avx2")]
pub unsafe fn tile_avx2(m: &Tl1Matrix, tables: &PairTables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    if g.tile.bm == 32 {
        return tile_bm32(m, tables, t, out);
    }
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
                add_widened(&mut dst[8 * j..8 * j + 8], *a);
            }
        }
    }
}

/// BM = 32 (the default tile): a step has two pairs (h = 0, 1) for each of two 16-row groups,
/// and a group's two index vectors lie side by side, so one 32-byte load takes both; lane 0
/// looks in pair h = 0's tables and lane 1 in h = 1's. The lanes hold separate int16 sums of the
/// same rows, added at the end (int16 addition wraps, so the total is the one the 16-byte kernel
/// forms, and it fits: see `TL1_MAX_BK`).
#[target_feature(enable = "avx2")]
unsafe fn tile_bm32(m: &Tl1Matrix, tables: &PairTables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    let (lut, w) = (tables.bytes.as_ptr(), m.packed.as_ptr());
    let mask = _mm256_set1_epi8(0x0f);
    for kb in 0..g.k_blocks() {
        for rb in 0..g.row_blocks() {
            let base = g.block_offset(t, kb, rb);
            // Rows 0–7, 8–15, 16–23, 24–31; lane 0 for pair h = 0, lane 1 for h = 1.
            let mut acc = [_mm256_setzero_si256(); 4];
            for sb in 0..g.tile.bk / g.by() {
                // Pair h's four 16-byte tables start at 32·pair(kb, sb, h), and pair(.., 1) is
                // pair(.., 0) + 2: h = 1's tables follow h = 0's by 64 bytes.
                let p = lut.add(g.pair(kb, sb, 0) * 32);
                let load = |i: usize| {
                    _mm256_set_m128i(_mm_loadu_si128(p.add(64 + 16 * i).cast()), _mm_loadu_si128(p.add(16 * i).cast()))
                };
                let (t0_hi, t0_lo, t1_hi, t1_lo) = (load(0), load(1), load(2), load(3));
                for gi in 0..2 {
                    let bytes = _mm256_loadu_si256(w.add(g.vector_offset(base, sb, gi, 0)).cast());
                    let (hi_idx, lo_idx) =
                        (_mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask), _mm256_and_si256(bytes, mask));
                    let (a_hi, a_lo) = (_mm256_shuffle_epi8(t0_hi, hi_idx), _mm256_shuffle_epi8(t0_lo, hi_idx));
                    let (b_hi, b_lo) = (_mm256_shuffle_epi8(t1_hi, lo_idx), _mm256_shuffle_epi8(t1_lo, lo_idx));
                    let rows_0_7 = _mm256_add_epi16(_mm256_unpacklo_epi8(a_lo, a_hi), _mm256_unpacklo_epi8(b_lo, b_hi));
                    let rows_8_15 =
                        _mm256_add_epi16(_mm256_unpackhi_epi8(a_lo, a_hi), _mm256_unpackhi_epi8(b_lo, b_hi));
                    acc[2 * gi] = _mm256_add_epi16(acc[2 * gi], rows_0_7);
                    acc[2 * gi + 1] = _mm256_add_epi16(acc[2 * gi + 1], rows_8_15);
                }
            }
            let dst = &mut out[rb * 32..(rb + 1) * 32];
            for (j, a) in acc.iter().enumerate() {
                let sum = _mm_add_epi16(_mm256_castsi256_si128(*a), _mm256_extracti128_si256::<1>(*a));
                add_widened(&mut dst[8 * j..8 * j + 8], sum);
            }
        }
    }
}
