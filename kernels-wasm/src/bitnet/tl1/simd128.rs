//! TL1 with `i8x16.swizzle`, which returns 0 for indices ≥ 16 and so behaves on 4-bit indices
//! exactly like `tbl`/`pshufb`.

use super::{PairTables, Tl1Matrix};
use core::arch::wasm32::*;

/// # Safety
/// The engine must support simd128; `tables` and `out` sized as `gemv_acc_tiles` checks.
#[target_feature(enable = "simd128")]
pub unsafe fn tile(m: &Tl1Matrix, tables: &PairTables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    let (lut, w) = (tables.bytes.as_ptr(), m.packed.as_ptr());
    let mask = u8x16_splat(0x0f);
    for kb in 0..g.k_blocks() {
        for rb in 0..g.row_blocks() {
            let first = t * g.tile.bm_tile + rb * g.tile.bm;
            let mut acc = [i16x8_splat(0); 8];
            for v in g.vectors(t, kb, rb) {
                let bytes = v128_load(w.add(v.offset).cast());
                let (hi_idx, lo_idx) = (u8x16_shr(bytes, 4), v128_and(bytes, mask));
                let (t0, t1) = (lut.add(v.pair * 32), lut.add(v.pair * 32 + 32));
                let look = |table: *const u8, idx| i8x16_swizzle(v128_load(table.cast()), idx);
                let (a_hi, a_lo) = (look(t0, hi_idx), look(t0.add(16), hi_idx));
                let (b_hi, b_lo) = (look(t1, lo_idx), look(t1.add(16), lo_idx));
                let zip_lo = |l, h| i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(l, h);
                let zip_hi = |l, h| i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(l, h);
                let j = (v.row0 - first) / 8;
                acc[j] = i16x8_add(acc[j], i16x8_add(zip_lo(a_lo, a_hi), zip_lo(b_lo, b_hi)));
                acc[j + 1] = i16x8_add(acc[j + 1], i16x8_add(zip_hi(a_lo, a_hi), zip_hi(b_lo, b_hi)));
            }
            let dst = &mut out[rb * g.tile.bm..(rb + 1) * g.tile.bm];
            for (j, a) in acc.iter().take(g.tile.bm / 8).enumerate() {
                let (lo, hi) = (i32x4_extend_low_i16x8(*a), i32x4_extend_high_i16x8(*a));
                let wide = [
                    i32x4_extract_lane::<0>(lo),
                    i32x4_extract_lane::<1>(lo),
                    i32x4_extract_lane::<2>(lo),
                    i32x4_extract_lane::<3>(lo),
                    i32x4_extract_lane::<0>(hi),
                    i32x4_extract_lane::<1>(hi),
                    i32x4_extract_lane::<2>(hi),
                    i32x4_extract_lane::<3>(hi),
                ];
                for (o, x) in dst[j * 8..j * 8 + 8].iter_mut().zip(wide) {
                    *o += x;
                }
            }
        }
    }
}
