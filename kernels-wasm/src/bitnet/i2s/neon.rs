//! I2_S on AArch64 NEON: 16 code bytes at a time, `smull` into int16, `sadalp` into int32.

use super::I2sLayout;
use core::arch::aarch64::*;

pub fn dot(codes: &[u8], q: &[i8], layout: I2sLayout) -> i32 {
    let (block, lanes) = (layout.block(), layout.lanes());
    assert_eq!(q.len(), codes.len() * 4, "I2_S row and activations differ in length");
    // SAFETY: NEON is part of the AArch64 baseline; every load stays inside `codes` and `q`
    // (checked by the length assertion above).
    unsafe {
        let mask = vdupq_n_u8(3);
        let mut acc = vdupq_n_s32(0);
        for (b, bytes) in codes.chunks_exact(lanes).enumerate() {
            for half in (0..lanes).step_by(16) {
                let v = vld1q_u8(bytes.as_ptr().add(half));
                let planes = [vshrq_n_u8::<6>(v), vshrq_n_u8::<4>(v), vshrq_n_u8::<2>(v), v];
                let mut s16 = vdupq_n_s16(0);
                for (plane, shifted) in planes.into_iter().enumerate() {
                    let c = vreinterpretq_s8_u8(vandq_u8(shifted, mask));
                    let a = vld1q_s8(q.as_ptr().add(b * block + plane * lanes + half));
                    s16 = vaddq_s16(s16, vmull_s8(vget_low_s8(c), vget_low_s8(a)));
                    s16 = vaddq_s16(s16, vmull_high_s8(c, a));
                }
                acc = vpadalq_s16(acc, s16);
            }
        }
        vaddvq_s32(acc)
    }
}
