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
            let base = g.block_offset(t, kb, rb);
            let mut acc = [i16x8_splat(0); 8];
            for sb in 0..g.tile.bk / g.by() {
                for h in 0..g.by() / 4 {
                    // The two pairs' tables serve every 16-row group of this step: load them once.
                    let p = lut.add(g.pair(kb, sb, h) * 32);
                    let tabs = [v128_load(p.cast()), v128_load(p.add(16).cast())];
                    let tabs_next = [v128_load(p.add(32).cast()), v128_load(p.add(48).cast())];
                    for gi in 0..g.tile.bm / 16 {
                        let bytes = v128_load(w.add(g.vector_offset(base, sb, gi, h)).cast());
                        let (hi_idx, lo_idx) = (u8x16_shr(bytes, 4), v128_and(bytes, mask));
                        // Tables store high bytes first, then low bytes.
                        let (a_hi, a_lo) = (i8x16_swizzle(tabs[0], hi_idx), i8x16_swizzle(tabs[1], hi_idx));
                        let (b_hi, b_lo) = (i8x16_swizzle(tabs_next[0], lo_idx), i8x16_swizzle(tabs_next[1], lo_idx));
                        let zip_lo =
                            |l, h| i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(l, h);
                        let zip_hi =
                            |l, h| i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(l, h);
                        acc[2 * gi] = i16x8_add(acc[2 * gi], i16x8_add(zip_lo(a_lo, a_hi), zip_lo(b_lo, b_hi)));
                        acc[2 * gi + 1] = i16x8_add(acc[2 * gi + 1], i16x8_add(zip_hi(a_lo, a_hi), zip_hi(b_lo, b_hi)));
                    }
                }
            }
            let dst = &mut out[rb * g.tile.bm..(rb + 1) * g.tile.bm];
            for (j, a) in acc.iter().take(g.tile.bm / 8).enumerate() {
                let p = dst.as_mut_ptr().add(8 * j).cast::<v128>();
                v128_store(p, i32x4_add(v128_load(p), i32x4_extend_low_i16x8(*a)));
                v128_store(p.add(1), i32x4_add(v128_load(p.add(1)), i32x4_extend_high_i16x8(*a)));
            }
        }
    }
}
