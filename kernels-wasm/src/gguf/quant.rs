//! ggml's block formats and their dequantisation, with ggml's own float operations in ggml's
//! order (`q · d + m`, no fused multiply-add), so the values equal llama.cpp's bit for bit.
//!
//! | type | weights/block | bytes | layout                                                  |
//! |------|---------------|-------|---------------------------------------------------------|
//! | Q4_0 | 32            | 18    | f16 d, 16 × (lo nibble: w[j], hi nibble: w[j+16]); w = (q−8)·d |
//! | Q4_1 | 32            | 20    | f16 d, f16 m, 16 nibble bytes as Q4_0; w = q·d + m     |
//! | Q5_0 | 32            | 22    | f16 d, u32 qh (5th bits), 16 nibble bytes; w = (q−16)·d |
//! | Q5_1 | 32            | 24    | f16 d, f16 m, u32 qh, 16 nibble bytes; w = q·d + m     |
//! | Q8_0 | 32            | 34    | f16 d, 32 × i8; w = q·d                                 |
//! | Q4_K | 256           | 144   | f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 nibble bytes |
//! | Q6_K | 256           | 210   | 128 low-nibble bytes, 64 bytes of 2-bit highs, 16 × i8 scales, f16 d |

use alloc::vec::Vec;

/// ggml tensor types by their GGUF id. The K-quants other than Q4_K/Q6_K and the i-quants are
/// known by size (so a file listing them parses) but not dequantised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    BF16,
    /// bitnet.cpp's ternary formats (its llama.cpp fork's ids): sizes follow no block rule,
    /// see [`GgmlType::tensor_bytes`].
    I2_S,
    TL1,
    TL2,
}

/// (GGUF id, type), the one table both directions read.
const IDS: [(u32, GgmlType); 18] = {
    use GgmlType::*;
    [
        (0, F32),
        (1, F16),
        (2, Q4_0),
        (3, Q4_1),
        (6, Q5_0),
        (7, Q5_1),
        (8, Q8_0),
        (9, Q8_1),
        (10, Q2_K),
        (11, Q3_K),
        (12, Q4_K),
        (13, Q5_K),
        (14, Q6_K),
        (15, Q8_K),
        (30, BF16),
        (36, I2_S),
        (38, TL1),
        (39, TL2),
    ]
};

impl GgmlType {
    pub fn from_id(id: u32) -> Option<GgmlType> {
        IDS.iter().find(|(i, _)| *i == id).map(|(_, t)| *t)
    }

    pub fn id(self) -> u32 {
        IDS.iter().find(|(_, t)| *t == self).map(|(i, _)| *i).unwrap_or(0)
    }

    pub fn block_elements(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | I2_S | TL1 | TL2 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => 256,
        }
    }

    pub fn block_bytes(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            // Four weights per byte; the trailer and padding are added by `tensor_bytes`.
            I2_S | TL1 | TL2 => 1,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
        }
    }

    /// Bytes of a tensor of this type with shape `dims` (innermost first); `None` for an empty,
    /// overflowing or block-splitting shape. The ternary types take what the fork's
    /// `ggml_nbytes` gives them: I2_S and TL1 `n/4 + 32` (codes, then a 32-byte trailer whose
    /// first f32 is I2_S's scale), TL2 `roundup32(((K−256)·M)/3·5/8 + 256·M/2·4/8) + 32`.
    pub fn tensor_bytes(self, dims: &[u64]) -> Option<u64> {
        let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).filter(|&n| n > 0)?;
        match self {
            GgmlType::I2_S | GgmlType::TL1 => Some(n.div_ceil(4) + 32),
            GgmlType::TL2 => {
                let (k, m) = (dims[0], n / dims[0]);
                // Checked throughout: a header may declare any dims (fuzzing found [u64::MAX, 1]).
                let three = (k.checked_sub(256)?.checked_mul(m)? / 3).checked_mul(5)? / 8;
                // 256·m/2·4/8 is exactly 64·m (libFuzzer found m = 2^61 overflowing the ·4).
                let two = m.checked_mul(64)?;
                three.checked_add(two)?.checked_next_multiple_of(32)?.checked_add(32)
            }
            _ => {
                let block = self.block_elements() as u64;
                if !n.is_multiple_of(block) {
                    return None;
                }
                // Checked: [2^62] f32 elements fit a u64, their bytes do not (libFuzzer found it).
                (n / block).checked_mul(self.block_bytes() as u64)
            }
        }
    }

    /// The types [`dequantize`] reads.
    pub const SUPPORTED: [GgmlType; 10] = {
        use GgmlType::*;
        [F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K]
    };
}

/// IEEE half to single, exactly (subnormals, infinities and NaN included).
pub fn f16_to_f32(h: u16) -> f32 {
    let (sign, exp, frac) = ((h as u32 & 0x8000) << 16, (h >> 10) & 0x1f, h as u32 & 0x3ff);
    let bits = match exp {
        0 if frac == 0 => sign,
        0 => {
            // Subnormal: value = frac · 2^-24, renormalised.
            let shift = frac.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | ((frac << shift) & 0x3ff) << 13
        }
        0x1f => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp as u32 + 112) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}

/// Single to IEEE half, rounding to nearest even (as F16C's `vcvtps2ph` and ggml do).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let frac = bits & 0x7f_ffff;
    if exp == 0xff {
        // Infinity stays infinite; NaN stays NaN (quiet).
        return sign | 0x7c00 | if frac != 0 { 0x200 | (frac >> 13) as u16 } else { 0 };
    }
    // Half's exponent bias is 15, single's 127.
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    let (mant, shift) = if e <= 0 {
        // Subnormal half (or zero): the implicit 1 joins the fraction, shifted further right.
        if e < -10 {
            return sign;
        }
        (frac | 0x80_0000, (14 - e) as u32)
    } else {
        (frac, 13)
    };
    let half_mant = mant >> shift;
    let rest = mant & ((1 << shift) - 1);
    let halfway = 1 << (shift - 1);
    let round_up = rest > halfway || (rest == halfway && half_mant & 1 == 1);
    // A carry out of the mantissa correctly bumps the exponent (up to infinity).
    let base = if e <= 0 { half_mant } else { ((e as u32) << 10) | half_mant };
    sign | (base + round_up as u32) as u16
}

fn half(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K block (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    if j < 4 {
        ((q[j] & 63) as f32, (q[j + 4] & 63) as f32)
    } else {
        (((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4)) as f32, ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as f32)
    }
}

/// Dequantises whole blocks of `ty` (`data.len()` a multiple of the block size); `None` for a
/// type not in [`GgmlType::SUPPORTED`].
pub fn dequantize(ty: GgmlType, data: &[u8]) -> Option<Vec<f32>> {
    use GgmlType::*;
    let blocks = data.chunks_exact(ty.block_bytes());
    let mut out = Vec::with_capacity(data.len() / ty.block_bytes() * ty.block_elements());
    match ty {
        F32 => out.extend(blocks.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        F16 => out.extend(blocks.map(|b| half(b, 0))),
        BF16 => out.extend(blocks.map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))),
        Q4_0 | Q4_1 | Q5_0 | Q5_1 => {
            let (has_min, has_high) = (matches!(ty, Q4_1 | Q5_1), matches!(ty, Q5_0 | Q5_1));
            for b in blocks {
                let d = half(b, 0);
                let m = if has_min { half(b, 2) } else { 0.0 };
                let mut at = if has_min { 4 } else { 2 };
                let qh = if has_high { u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) } else { 0 };
                at += if has_high { 4 } else { 0 };
                let qs = &b[at..at + 16];
                // Without a min the codes are centred: 4-bit − 8, 5-bit − 16.
                let centre = if has_min {
                    0
                } else if has_high {
                    16
                } else {
                    8
                };
                let mut lo = [0f32; 16];
                let mut hi = [0f32; 16];
                for j in 0..16 {
                    let h0 = ((qh >> j) << 4) & 0x10;
                    let h1 = (qh >> (j + 12)) & 0x10;
                    let q0 = ((qs[j] & 0xf) as u32 | h0) as i32 - centre;
                    let q1 = ((qs[j] >> 4) as u32 | h1) as i32 - centre;
                    (lo[j], hi[j]) =
                        if has_min { (q0 as f32 * d + m, q1 as f32 * d + m) } else { (q0 as f32 * d, q1 as f32 * d) };
                }
                out.extend_from_slice(&lo);
                out.extend_from_slice(&hi);
            }
        }
        Q8_0 => {
            for b in blocks {
                let d = half(b, 0);
                out.extend(b[2..34].iter().map(|&q| q as i8 as f32 * d));
            }
        }
        Q4_K => {
            for b in blocks {
                let (d, dmin) = (half(b, 0), half(b, 2));
                let (scales, qs) = (&b[4..16], &b[16..144]);
                for (chunk, q) in qs.chunks_exact(32).enumerate() {
                    let (sc, m) = scale_min_k4(2 * chunk, scales);
                    let (d1, m1) = (d * sc, dmin * m);
                    out.extend(q.iter().map(|&v| d1 * (v & 0xf) as f32 - m1));
                    let (sc, m) = scale_min_k4(2 * chunk + 1, scales);
                    let (d2, m2) = (d * sc, dmin * m);
                    out.extend(q.iter().map(|&v| d2 * (v >> 4) as f32 - m2));
                }
            }
        }
        Q6_K => {
            for b in blocks {
                let (ql, qh, sc, d) = (&b[0..128], &b[128..192], &b[192..208], half(b, 208));
                for n in 0..2 {
                    let (ql, qh, sc) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..]);
                    let mut y = [0f32; 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q = |lo: u8, shift: u32| ((lo as i32) | ((((qh[l] >> shift) & 3) as i32) << 4)) - 32;
                        let s = |k: usize| d * sc[is + k] as i8 as f32;
                        y[l] = s(0) * q(ql[l] & 0xf, 0) as f32;
                        y[l + 32] = s(2) * q(ql[l + 32] & 0xf, 2) as f32;
                        y[l + 64] = s(4) * q(ql[l] >> 4, 4) as f32;
                        y[l + 96] = s(6) * q(ql[l + 32] >> 4, 6) as f32;
                    }
                    out.extend_from_slice(&y);
                }
            }
        }
        Q8_1 | Q2_K | Q3_K | Q5_K | Q8_K | I2_S | TL1 | TL2 => return None,
    }
    Some(out)
}
