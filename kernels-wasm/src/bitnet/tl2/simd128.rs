//! TL2 with `i8x16.swizzle`: a 32-byte vector is two halves; half 0 (bytes 0–15) holds rows
//! 0–7 and 16–23, half 1 rows 8–15 and 24–31 (the [`super::row_of`] order), so the byte zips
//! give rows 0–7, 16–23, 8–15, 24–31.

use super::{Tl2Matrix, Tl2Tables, BM32};
use core::arch::wasm32::*;

/// int16 partial sums of rows 0–7, 8–15, 16–23, 24–31.
type Acc = [v128; 4];

#[inline(always)]
unsafe fn zips(lo: v128, hi: v128) -> (v128, v128) {
    (
        i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(lo, hi),
        i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(lo, hi),
    )
}

/// Looks up a low-first table for both halves of a vector: int16 rows in [`Acc`] order.
#[inline]
#[target_feature(enable = "simd128")]
unsafe fn look(table: *const u8, idx: [v128; 2]) -> Acc {
    let (lo, hi) = (v128_load(table.cast()), v128_load(table.add(16).cast()));
    let (r0, r16) = zips(i8x16_swizzle(lo, idx[0]), i8x16_swizzle(hi, idx[0]));
    let (r8, r24) = zips(i8x16_swizzle(lo, idx[1]), i8x16_swizzle(hi, idx[1]));
    [r0, r8, r16, r24]
}

#[inline]
#[target_feature(enable = "simd128")]
unsafe fn nibbles(p: *const u8) -> ([v128; 2], [v128; 2]) {
    let (h0, h1) = (v128_load(p.cast()), v128_load(p.add(16).cast()));
    let mask = u8x16_splat(0x0f);
    ([u8x16_shr(h0, 4), u8x16_shr(h1, 4)], [v128_and(h0, mask), v128_and(h1, mask)])
}

#[inline]
#[target_feature(enable = "simd128")]
unsafe fn widen_into(acc: Acc, dst: &mut [i32]) {
    for (i, a) in acc.into_iter().enumerate() {
        let p = dst.as_mut_ptr().add(8 * i).cast::<v128>();
        v128_store(p, i32x4_add(v128_load(p), i32x4_extend_low_i16x8(a)));
        v128_store(p.add(1), i32x4_add(v128_load(p.add(1)), i32x4_extend_high_i16x8(a)));
    }
}

/// # Safety
/// The engine must support simd128; `tables` and `out` sized as `gemv_acc_tiles` checks.
#[target_feature(enable = "simd128")]
pub unsafe fn tile(m: &Tl2Matrix, tables: &Tl2Tables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    let (w, lut) = (m.packed.as_ptr(), tables.three.as_ptr());
    for rb in 0..g.row_blocks() {
        let dst = &mut out[rb * BM32..(rb + 1) * BM32];
        for kb in 0..g.k_blocks() {
            let mut acc: Acc = [i16x8_splat(0); 4];
            for sb in 0..g.vectors_per_block() {
                let (hi_idx, lo_idx) = nibbles(w.add(g.mag_offset(t, kb, rb, sb)));
                let s = w.add(g.sign_offset(t, kb, rb, sb / 4));
                // Sign lanes 0–7 serve rows 0–7 and 16–23, lanes 8–15 rows 8–15 and 24–31.
                let lanes = [v128_load(s.cast()), v128_load(s.add(16).cast())];
                let tr = g.triplet(kb, sb);
                let (a, b) = (look(lut.add(tr * 32), hi_idx), look(lut.add(tr * 32 + 32), lo_idx));
                let top = 4 * (sb % 4) as u32;
                for (i, lane, odd) in [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)] {
                    let sign = |a: u32| i16x8_shr(i16x8_shl(lanes[lane], a), 15);
                    let (sa, sb_) = (sign(top + odd), sign(top + 2 + odd));
                    let va = v128_xor(i16x8_add(a[i], sa), sa);
                    let vb = v128_xor(i16x8_add(b[i], sb_), sb_);
                    acc[i] = i16x8_add(acc[i], i16x8_add(va, vb));
                }
            }
            widen_into(acc, dst);
        }
        for kb in 0..g.tail_blocks() {
            let mut acc: Acc = [i16x8_splat(0); 4];
            for sb in 0..8 {
                let (hi_idx, lo_idx) = nibbles(w.add(g.tail_offset(t, kb, rb, sb)));
                let p = tables.two.as_ptr().add((kb * 16 + 2 * sb) * 32);
                let (a, b) = (look(p, hi_idx), look(p.add(32), lo_idx));
                for i in 0..4 {
                    acc[i] = i16x8_add(acc[i], i16x8_add(a[i], b[i]));
                }
            }
            widen_into(acc, dst);
        }
    }
}
