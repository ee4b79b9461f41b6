//! TL2 on x86-64. AVX2 (bitnet.cpp's kernel): one 32-byte magnitude vector = 32 rows × 2
//! triplets per step; each 16-byte half-table is broadcast to both lanes, `pshufb` looks up the
//! low and high bytes, and the in-lane unpacks give rows 0–15 and 16–31 in order (that is what
//! the [`super::row_of`] layout is for). AVX-512 VBMI: two vectors per step; `vpermi2b` indexes
//! 128 bytes — the four triplet tables the two vectors need — with 7-bit indices, so one
//! instruction does what takes a broadcast and a `pshufb` per table on AVX2.

use super::{Tl2Matrix, Tl2Tables, BM32};
use core::arch::x86_64::*;

/// int16 partial sums of one 32-row block: rows 0–15 and rows 16–31.
type Acc = [__m256i; 2];

/// `(v + s) ^ s`: `v` negated where the sign mask `s` is −1.
#[inline(always)]
unsafe fn apply_sign(v: __m256i, s: __m256i) -> __m256i {
    _mm256_xor_si256(_mm256_add_epi16(v, s), s)
}

/// Looks up a low-first 32-byte table with 4-bit indices: int16 entries of rows 0–15 and 16–31.
#[inline(always)]
unsafe fn look(table: *const u8, idx: __m256i) -> (__m256i, __m256i) {
    let lo = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(table.cast())), idx);
    let hi = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(table.add(16).cast())), idx);
    (_mm256_unpacklo_epi8(lo, hi), _mm256_unpackhi_epi8(lo, hi))
}

/// Adds the widened int16 sums to the block's 32 int32 outputs.
#[inline(always)]
unsafe fn widen_into(acc: Acc, dst: &mut [i32]) {
    for (i, a) in acc.into_iter().enumerate() {
        for (h, half) in [_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a)].into_iter().enumerate() {
            let p = dst.as_mut_ptr().add(16 * i + 8 * h).cast::<__m256i>();
            _mm256_storeu_si256(p, _mm256_add_epi32(_mm256_loadu_si256(p), _mm256_cvtepi16_epi32(half)));
        }
    }
}

/// The two-weight tail of row block `rb` of tile `t`.
#[target_feature(enable = "avx2")]
unsafe fn tail_avx2(m: &Tl2Matrix, tables: &Tl2Tables, t: usize, rb: usize, dst: &mut [i32]) {
    let g = &m.geometry;
    let mask = _mm256_set1_epi8(0x0f);
    for kb in 0..g.tail_blocks() {
        let mut acc: Acc = [_mm256_setzero_si256(); 2];
        for sb in 0..8 {
            let bytes = _mm256_loadu_si256(m.packed.as_ptr().add(g.tail_offset(t, kb, rb, sb)).cast());
            let p = kb * 16 + 2 * sb;
            let (a0, a1) = look(tables.two.as_ptr().add(p * 32), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask));
            let (b0, b1) = look(tables.two.as_ptr().add(p * 32 + 32), _mm256_and_si256(bytes, mask));
            acc[0] = _mm256_add_epi16(acc[0], _mm256_add_epi16(a0, b0));
            acc[1] = _mm256_add_epi16(acc[1], _mm256_add_epi16(a1, b1));
        }
        widen_into(acc, dst);
    }
}

/// # Safety
/// The CPU must support AVX2; `tables` and `out` sized as `gemv_acc_tiles` checks.
#[target_feature(enable = "avx2")]
pub unsafe fn tile_avx2(m: &Tl2Matrix, tables: &Tl2Tables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    let (w, lut) = (m.packed.as_ptr(), tables.three.as_ptr());
    let mask = _mm256_set1_epi8(0x0f);
    // The tile reads its magnitudes in (rb, kb) order, a stride the hardware prefetcher follows
    // poorly: fetch the next tile's magnitude bytes ahead, a share per block (a prefetch past
    // the matrix is harmless).
    let blocks = g.row_blocks() * g.k_blocks();
    let tile_bytes = g.mag_offset(1, 0, 0, 0);
    let share = tile_bytes.div_ceil(blocks).next_multiple_of(64);
    let next = w.wrapping_add(g.mag_offset(t, 0, 0, 0) + tile_bytes);
    // The sign bit-planes likewise.
    let sign_bytes = g.sign_offset(1, 0, 0, 0) - g.sign_offset(0, 0, 0, 0);
    let sign_share = sign_bytes.div_ceil(blocks).next_multiple_of(64);
    let next_signs = w.wrapping_add(g.sign_offset(t, 0, 0, 0) + sign_bytes);
    for rb in 0..g.row_blocks() {
        let dst = &mut out[rb * BM32..(rb + 1) * BM32];
        for kb in 0..g.k_blocks() {
            let ahead = next.wrapping_add((rb * g.k_blocks() + kb) * share);
            for line in (0..share).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
            }
            let ahead = next_signs.wrapping_add((rb * g.k_blocks() + kb) * sign_share);
            for line in (0..sign_share).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
            }
            let mut acc: Acc = [_mm256_setzero_si256(); 2];
            for sb in 0..g.vectors_per_block() {
                let bytes = _mm256_loadu_si256(w.add(g.mag_offset(t, kb, rb, sb)).cast());
                let signs = _mm256_loadu_si256(w.add(g.sign_offset(t, kb, rb, sb / 4)).cast());
                let tr = g.triplet(kb, sb);
                let (a0, a1) = look(lut.add(tr * 32), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask));
                let (b0, b1) = look(lut.add(tr * 32 + 32), _mm256_and_si256(bytes, mask));
                // Bit 15 − a of each u16 lane, moved to the top and spread: a = 4j .. 4j + 3.
                let top = _mm_cvtsi32_si128(4 * (sb % 4) as i32);
                let sign = |extra: i32| {
                    _mm256_srai_epi16::<15>(_mm256_sll_epi16(signs, _mm_add_epi64(top, _mm_cvtsi32_si128(extra))))
                };
                acc[0] = _mm256_add_epi16(acc[0], _mm256_add_epi16(apply_sign(a0, sign(0)), apply_sign(b0, sign(2))));
                acc[1] = _mm256_add_epi16(acc[1], _mm256_add_epi16(apply_sign(a1, sign(1)), apply_sign(b1, sign(3))));
            }
            widen_into(acc, dst);
        }
        tail_avx2(m, tables, t, rb, dst);
    }
}

/// [`tile_avx2`] for two activation rows' tables at once (prompt processing): each magnitude
/// vector's indices and each sign group's masks are worked out once for both.
///
/// # Safety
/// The CPU must support AVX2; both `tables` and `out`s sized as `gemv_acc_tiles` checks.
#[target_feature(enable = "avx2")]
pub unsafe fn tile2_avx2(m: &Tl2Matrix, tables: [&Tl2Tables; 2], t: usize, out: [&mut [i32]; 2]) {
    let g = &m.geometry;
    let w = m.packed.as_ptr();
    let luts = [tables[0].three.as_ptr(), tables[1].three.as_ptr()];
    let mask = _mm256_set1_epi8(0x0f);
    let [out0, out1] = out;
    for rb in 0..g.row_blocks() {
        let dst = [&mut out0[rb * BM32..(rb + 1) * BM32], &mut out1[rb * BM32..(rb + 1) * BM32]];
        for kb in 0..g.k_blocks() {
            let mut acc: [Acc; 2] = [[_mm256_setzero_si256(); 2]; 2];
            for sb in 0..g.vectors_per_block() {
                let bytes = _mm256_loadu_si256(w.add(g.mag_offset(t, kb, rb, sb)).cast());
                let signs = _mm256_loadu_si256(w.add(g.sign_offset(t, kb, rb, sb / 4)).cast());
                let tr = g.triplet(kb, sb);
                let (hi, lo) = (_mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask), _mm256_and_si256(bytes, mask));
                let top = 4 * (sb % 4) as i32;
                let sign =
                    |extra: i32| _mm256_srai_epi16::<15>(_mm256_sll_epi16(signs, _mm_cvtsi32_si128(top + extra)));
                let (s0, s1, s2, s3) = (sign(0), sign(1), sign(2), sign(3));
                for (acc, lut) in acc.iter_mut().zip(luts) {
                    let (a0, a1) = look(lut.add(tr * 32), hi);
                    let (b0, b1) = look(lut.add(tr * 32 + 32), lo);
                    acc[0] = _mm256_add_epi16(acc[0], _mm256_add_epi16(apply_sign(a0, s0), apply_sign(b0, s2)));
                    acc[1] = _mm256_add_epi16(acc[1], _mm256_add_epi16(apply_sign(a1, s1), apply_sign(b1, s3)));
                }
            }
            widen_into(acc[0], &mut *dst[0]);
            widen_into(acc[1], &mut *dst[1]);
        }
        let [d0, d1] = dst;
        tail_avx2(m, tables[0], t, rb, d0);
        tail_avx2(m, tables[1], t, rb, d1);
    }
}

/// # Safety
/// The CPU must support AVX-512 F/BW/VBMI; `tables` and `out` sized as `gemv_acc_tiles` checks.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx2")]
pub unsafe fn tile_avx512(m: &Tl2Matrix, tables: &Tl2Tables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    let (w, lut) = (m.packed.as_ptr(), tables.three.as_ptr());
    let mask = _mm512_set1_epi8(0x0f);
    // Byte i of the 64 looks in the tables of vector sb (bytes 0–31: triplets 0, 1 → table bytes
    // 0–63) or of vector sb + 1 (bytes 32–63: triplets 2, 3 → table bytes 64–127).
    let second = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi8(64));
    let (plus16, plus32) = (_mm512_set1_epi8(16), _mm512_set1_epi8(32));
    // BK/6 is 16 or 32: vectors pair up, and both of a pair share one sign group.
    for rb in 0..g.row_blocks() {
        let dst = &mut out[rb * BM32..(rb + 1) * BM32];
        for kb in 0..g.k_blocks() {
            let (mut acc0, mut acc1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for sb in (0..g.vectors_per_block()).step_by(2) {
                let bytes = _mm512_loadu_si512(w.add(g.mag_offset(t, kb, rb, sb)).cast());
                let signs = _mm512_broadcast_i64x4(_mm256_loadu_si256(w.add(g.sign_offset(t, kb, rb, sb / 4)).cast()));
                let table = lut.add(g.triplet(kb, sb) * 32);
                let (t01, t23) = (_mm512_loadu_si512(table.cast()), _mm512_loadu_si512(table.add(64).cast()));
                let hi_idx = _mm512_add_epi8(_mm512_and_si512(_mm512_srli_epi16::<4>(bytes), mask), second);
                let lo_idx = _mm512_add_epi8(_mm512_add_epi8(_mm512_and_si512(bytes, mask), second), plus32);
                let look = |idx| {
                    let lo = _mm512_permutex2var_epi8(t01, idx, t23);
                    let hi = _mm512_permutex2var_epi8(t01, _mm512_add_epi8(idx, plus16), t23);
                    (_mm512_unpacklo_epi8(lo, hi), _mm512_unpackhi_epi8(lo, hi))
                };
                let ((a0, a1), (b0, b1)) = (look(hi_idx), look(lo_idx));
                // Vector sb uses sign bits from a = 4j, vector sb + 1 from a = 4j + 4.
                let j = 4 * (sb % 4) as i16;
                // All ones where the lane's sign bit 15 − c is set (c = j + extra in the low
                // half, j + 4 + extra in the high): a bit test, not `vpsllvw`, which Miri
                // cannot interpret.
                let sign = |extra: i16| {
                    let bit = |c: i16| (1u16 << (15 - c)) as i16;
                    let bits = _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(_mm256_set1_epi16(bit(j + extra))),
                        _mm256_set1_epi16(bit(j + 4 + extra)),
                    );
                    _mm512_movm_epi16(_mm512_test_epi16_mask(signs, bits))
                };
                let apply = |v, s| _mm512_xor_si512(_mm512_add_epi16(v, s), s);
                acc0 = _mm512_add_epi16(acc0, _mm512_add_epi16(apply(a0, sign(0)), apply(b0, sign(2))));
                acc1 = _mm512_add_epi16(acc1, _mm512_add_epi16(apply(a1, sign(1)), apply(b1, sign(3))));
            }
            // The two vectors' halves hold the same rows: fold them.
            let fold = |a| _mm256_add_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64::<1>(a));
            widen_into([fold(acc0), fold(acc1)], dst);
        }
        tail_avx2(m, tables, t, rb, dst);
    }
}
