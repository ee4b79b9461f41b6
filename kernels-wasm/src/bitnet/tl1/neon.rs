//! TL1 with `tbl` (`vqtbl1q_u8`), as bitnet.cpp's ARM kernel: two lookups per nibble plane,
//! `zip` back to int16.

use super::{PairTables, Tl1Matrix};
use core::arch::aarch64::*;

pub fn tile(m: &Tl1Matrix, tables: &PairTables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    // SAFETY: NEON is baseline on AArch64. Every vector offset lies inside `packed`
    // (Geometry enumerates M·K/4 bytes) and every table inside `tables` (its length was checked
    // against K by the caller).
    unsafe {
        let (lut, w) = (tables.bytes.as_ptr(), m.packed.as_ptr());
        let mask = vdupq_n_u8(0x0f);
        for kb in 0..g.k_blocks() {
            for rb in 0..g.row_blocks() {
                let base = g.block_offset(t, kb, rb);
                let mut acc = [vdupq_n_s16(0); 8];
                for sb in 0..g.tile.bk / g.by() {
                    for h in 0..g.by() / 4 {
                        // The two pairs' tables serve every 16-row group of this step: load them once.
                        let p = lut.add(g.pair(kb, sb, h) * 32);
                        let (t0_hi, t0_lo, t1_hi, t1_lo) =
                            (vld1q_u8(p), vld1q_u8(p.add(16)), vld1q_u8(p.add(32)), vld1q_u8(p.add(48)));
                        for gi in 0..g.tile.bm / 16 {
                            let bytes = vld1q_u8(w.add(g.vector_offset(base, sb, gi, h)));
                            let (hi_idx, lo_idx) = (vshrq_n_u8::<4>(bytes), vandq_u8(bytes, mask));
                            let (a_hi, a_lo) = (vqtbl1q_u8(t0_hi, hi_idx), vqtbl1q_u8(t0_lo, hi_idx));
                            let (b_hi, b_lo) = (vqtbl1q_u8(t1_hi, lo_idx), vqtbl1q_u8(t1_lo, lo_idx));
                            let as16 = |x| vreinterpretq_s16_u8(x);
                            let rows_0_7 = vaddq_s16(as16(vzip1q_u8(a_lo, a_hi)), as16(vzip1q_u8(b_lo, b_hi)));
                            let rows_8_15 = vaddq_s16(as16(vzip2q_u8(a_lo, a_hi)), as16(vzip2q_u8(b_lo, b_hi)));
                            acc[2 * gi] = vaddq_s16(acc[2 * gi], rows_0_7);
                            acc[2 * gi + 1] = vaddq_s16(acc[2 * gi + 1], rows_8_15);
                        }
                    }
                }
                let dst = &mut out[rb * g.tile.bm..(rb + 1) * g.tile.bm];
                for (j, a) in acc.iter().take(g.tile.bm / 8).enumerate() {
                    let mut wide = [0i32; 8];
                    vst1q_s32(wide.as_mut_ptr(), vmovl_s16(vget_low_s16(*a)));
                    vst1q_s32(wide.as_mut_ptr().add(4), vmovl_high_s16(*a));
                    for (o, x) in dst[j * 8..j * 8 + 8].iter_mut().zip(wide) {
                        *o += x;
                    }
                }
            }
        }
    }
}
