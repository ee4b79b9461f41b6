//! The portable I2_S dot product: the reference the SIMD versions must equal.

use super::I2sLayout;

/// `Σ code·q` over one row of packed codes.
pub fn dot(codes: &[u8], q: &[i8], layout: I2sLayout) -> i32 {
    let (block, lanes) = (layout.block(), layout.lanes());
    let mut acc = 0i32;
    for (b, bytes) in codes.chunks_exact(lanes).enumerate() {
        let q = &q[b * block..(b + 1) * block];
        for (i, &byte) in bytes.iter().enumerate() {
            for plane in 0..4 {
                let code = (byte >> (6 - 2 * plane)) & 3;
                acc += code as i32 * q[plane * lanes + i] as i32;
            }
        }
    }
    acc
}
