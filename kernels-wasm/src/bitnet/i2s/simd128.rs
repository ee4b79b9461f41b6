//! I2_S in WebAssembly SIMD: 16 code bytes at a time, products widened to int16 by `extmul`,
//! then pairwise-added into int32.

use super::I2sLayout;
use core::arch::wasm32::*;

/// # Safety
/// The engine must support simd128; `q.len() == codes.len() * 4`.
#[target_feature(enable = "simd128")]
pub unsafe fn dot(codes: &[u8], q: &[i8], layout: I2sLayout) -> i32 {
    let (block, lanes) = (layout.block(), layout.lanes());
    let mask = u8x16_splat(3);
    let mut acc = i32x4_splat(0);
    for (b, bytes) in codes.chunks_exact(lanes).enumerate() {
        for half in (0..lanes).step_by(16) {
            let v = v128_load(bytes.as_ptr().add(half).cast());
            let mut s16 = i16x8_splat(0);
            for plane in 0..4u32 {
                let c = v128_and(u8x16_shr(v, 6 - 2 * plane), mask);
                let a = v128_load(q.as_ptr().add(b * block + plane as usize * lanes + half).cast());
                // Codes are 0..=2, so the signed widening multiply is exact; |lo + hi| ≤ 512.
                s16 = i16x8_add(s16, i16x8_add(i16x8_extmul_low_i8x16(c, a), i16x8_extmul_high_i8x16(c, a)));
            }
            acc = i32x4_add(acc, i32x4_extadd_pairwise_i16x8(s16));
        }
    }
    i32x4_extract_lane::<0>(acc)
        + i32x4_extract_lane::<1>(acc)
        + i32x4_extract_lane::<2>(acc)
        + i32x4_extract_lane::<3>(acc)
}
