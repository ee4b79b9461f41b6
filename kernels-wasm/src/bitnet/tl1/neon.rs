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
                let first = t * g.tile.bm_tile + rb * g.tile.bm;
                let mut acc = [vdupq_n_s16(0); 8];
                for v in g.vectors(t, kb, rb) {
                    let bytes = vld1q_u8(w.add(v.offset));
                    let (hi_idx, lo_idx) = (vshrq_n_u8::<4>(bytes), vandq_u8(bytes, mask));
                    let (t0, t1) = (lut.add(v.pair * 32), lut.add(v.pair * 32 + 32));
                    let look = |table: *const u8, idx| vqtbl1q_u8(vld1q_u8(table), idx);
                    let (a_hi, a_lo) = (look(t0, hi_idx), look(t0.add(16), hi_idx));
                    let (b_hi, b_lo) = (look(t1, lo_idx), look(t1.add(16), lo_idx));
                    let as16 = |x| vreinterpretq_s16_u8(x);
                    let j = (v.row0 - first) / 8;
                    acc[j] = vaddq_s16(acc[j], vaddq_s16(as16(vzip1q_u8(a_lo, a_hi)), as16(vzip1q_u8(b_lo, b_hi))));
                    acc[j + 1] =
                        vaddq_s16(acc[j + 1], vaddq_s16(as16(vzip2q_u8(a_lo, a_hi)), as16(vzip2q_u8(b_lo, b_hi))));
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
