//! TL2 with `tbl` (`vqtbl1q_u8`): a 32-byte vector is two halves; half 0 holds rows 0–7 and
//! 16–23, half 1 rows 8–15 and 24–31 (the [`super::row_of`] order), so `zip1`/`zip2` give
//! rows 0–7, 16–23, 8–15, 24–31.

use super::{Tl2Matrix, Tl2Tables, BM32};
use core::arch::aarch64::*;

/// int16 partial sums of rows 0–7, 8–15, 16–23, 24–31.
type Acc = [int16x8_t; 4];

/// Looks up a low-first table for both halves of a vector: int16 rows in [`Acc`] order.
#[inline(always)]
unsafe fn look(table: *const u8, idx: [uint8x16_t; 2]) -> Acc {
    let (lo, hi) = (vld1q_u8(table), vld1q_u8(table.add(16)));
    let zip = |l, h| (vreinterpretq_s16_u8(vzip1q_u8(l, h)), vreinterpretq_s16_u8(vzip2q_u8(l, h)));
    let (r0, r16) = zip(vqtbl1q_u8(lo, idx[0]), vqtbl1q_u8(hi, idx[0]));
    let (r8, r24) = zip(vqtbl1q_u8(lo, idx[1]), vqtbl1q_u8(hi, idx[1]));
    [r0, r8, r16, r24]
}

#[inline(always)]
unsafe fn nibbles(p: *const u8) -> ([uint8x16_t; 2], [uint8x16_t; 2]) {
    let (h0, h1) = (vld1q_u8(p), vld1q_u8(p.add(16)));
    let mask = vdupq_n_u8(0x0f);
    ([vshrq_n_u8::<4>(h0), vshrq_n_u8::<4>(h1)], [vandq_u8(h0, mask), vandq_u8(h1, mask)])
}

#[inline(always)]
unsafe fn widen_into(acc: Acc, dst: &mut [i32]) {
    for (i, a) in acc.into_iter().enumerate() {
        let p = dst.as_mut_ptr().add(8 * i);
        vst1q_s32(p, vaddq_s32(vld1q_s32(p), vmovl_s16(vget_low_s16(a))));
        vst1q_s32(p.add(4), vaddq_s32(vld1q_s32(p.add(4)), vmovl_high_s16(a)));
    }
}

pub fn tile(m: &Tl2Matrix, tables: &Tl2Tables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    // SAFETY: NEON is baseline on AArch64. Every offset comes from Geometry (inside `packed`),
    // the table lengths were checked against K by the caller, `out` holds BM values.
    unsafe {
        let (w, lut) = (m.packed.as_ptr(), tables.three.as_ptr());
        for rb in 0..g.row_blocks() {
            let dst = &mut out[rb * BM32..(rb + 1) * BM32];
            for kb in 0..g.k_blocks() {
                let mut acc: Acc = [vdupq_n_s16(0); 4];
                for sb in 0..g.vectors_per_block() {
                    let (hi_idx, lo_idx) = nibbles(w.add(g.mag_offset(t, kb, rb, sb)));
                    let s = w.add(g.sign_offset(t, kb, rb, sb / 4));
                    // Sign lanes 0–7 serve rows 0–7 and 16–23, lanes 8–15 rows 8–15 and 24–31.
                    let lanes = [vld1q_s16(s.cast()), vld1q_s16(s.add(16).cast())];
                    let tr = g.triplet(kb, sb);
                    let (a, b) = (look(lut.add(tr * 32), hi_idx), look(lut.add(tr * 32 + 32), lo_idx));
                    let top = 4 * (sb % 4) as i16;
                    for (i, lane, odd) in [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)] {
                        let sign = |a: i16| vshrq_n_s16::<15>(vshlq_s16(lanes[lane], vdupq_n_s16(a)));
                        let (sa, sb_) = (sign(top + odd), sign(top + 2 + odd));
                        let va = veorq_s16(vaddq_s16(a[i], sa), sa);
                        let vb = veorq_s16(vaddq_s16(b[i], sb_), sb_);
                        acc[i] = vaddq_s16(acc[i], vaddq_s16(va, vb));
                    }
                }
                widen_into(acc, dst);
            }
            for kb in 0..g.tail_blocks() {
                let mut acc: Acc = [vdupq_n_s16(0); 4];
                for sb in 0..8 {
                    let (hi_idx, lo_idx) = nibbles(w.add(g.tail_offset(t, kb, rb, sb)));
                    let p = tables.two.as_ptr().add((kb * 16 + 2 * sb) * 32);
                    let (a, b) = (look(p, hi_idx), look(p.add(32), lo_idx));
                    for i in 0..4 {
                        acc[i] = vaddq_s16(acc[i], vaddq_s16(a[i], b[i]));
                    }
                }
                widen_into(acc, dst);
            }
        }
    }
}
